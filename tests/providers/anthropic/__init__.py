"""Tests of the Anthropic Messages provider."""
