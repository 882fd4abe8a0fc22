"""Tests of the Chat Completions provider."""
