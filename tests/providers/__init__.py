"""Tests of the providers: the shared decoding kit, real-traffic conformance, each protocol."""
