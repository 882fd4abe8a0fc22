"""OpenAI Chat Completions (`POST {base}/chat/completions`): OpenAI, and the many servers
that speak it (Azure, vLLM, Ollama, llama.cpp, OpenRouter, DeepSeek, Groq, Mistral …)."""

from __future__ import annotations

from ..openai import openai_provider
from .codec import ChatCodec

PROVIDER = openai_provider("chat", "OpenAI Chat Completions", ChatCodec.from_options)
