"""Tests of the core layer, one file per module of src/lockgate (and the memory bounds)."""
