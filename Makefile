# Test and benchmark entry points. scripts/test.sh does the real work; see
# its header for the environment variables it understands.

# Extra flags for go test, e.g. make test TESTFLAGS='-run Foo -v'.
TESTFLAGS ?=

.PHONY: test bench bench-full

test:
	bash scripts/test.sh $(TESTFLAGS)

# Every speed target, paired with hand-written SQL, in one table (a few minutes).
bench:
	bash scripts/bench.sh

# The same, BENCH_COUNT runs (default 2), and BENCHMARKS.md regenerated.
bench-full:
	bash scripts/bench.sh --full
