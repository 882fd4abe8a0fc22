"""Tests of the OpenAI Responses provider."""
