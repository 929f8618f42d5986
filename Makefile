# Test and benchmark entry points. scripts/test.sh does the real work; see
# its header for the environment variables it understands.

# Extra flags for go test, e.g. make test TESTFLAGS='-run Foo -v'.
TESTFLAGS ?=

.PHONY: test bench

test:
	bash scripts/test.sh $(TESTFLAGS)

# The core against raw sqlx, six runs, through benchstat (see BENCHMARKS.md).
bench:
	bash scripts/bench.sh
