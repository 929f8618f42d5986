# Test and benchmark entry points. scripts/test.sh does the real work; see
# its header for the environment variables it understands.

# Extra flags for go test, e.g. make test TESTFLAGS='-run Foo -v'.
TESTFLAGS ?=

.PHONY: test bench

test:
	bash scripts/test.sh $(TESTFLAGS)

# Placeholder: scripts/bench.sh is not written yet.
bench:
	bash scripts/bench.sh
