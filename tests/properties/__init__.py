"""Property-based tests: fragmentation, corruption, openings and garbage, for every protocol."""
