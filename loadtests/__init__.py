"""Load tests and benchmarks (scripts, run on demand; never timed in the test suite)."""
