"""What the tests and the benchmarks share: free ports, processes, a model, a store, photos."""
