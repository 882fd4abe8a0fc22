"""OpenAI Chat Completions (`POST {base}/chat/completions`): OpenAI, and the many servers
that speak it (Azure, vLLM, Ollama, llama.cpp, OpenRouter, DeepSeek, Groq, Mistral …)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...transport import Transport
from ..base import CodecOptions, Provider, TransportOptions
from ..openai import BASE_URL_HINT, BASE_URL_VARIABLE, DEFAULT_MODEL, KEY_VARIABLE
from ..openai.errors import classify_openai_failure
from .codec import ChatCodec

if TYPE_CHECKING:
    from ...lab.protocol import LabProtocol


def _codec(options: CodecOptions) -> ChatCodec:
    return ChatCodec.from_options(options)


def _transport(options: TransportOptions) -> Transport:
    from ..openai.transport import OpenAITransport  # imports the SDK: only when needed

    return OpenAITransport(options, "chat")


def _lab() -> LabProtocol:
    from .lab import ChatLab

    return ChatLab()


PROVIDER = Provider(
    name="chat",
    title="OpenAI Chat Completions",
    key_variable=KEY_VARIABLE,
    base_url_variable=BASE_URL_VARIABLE,
    default_model=DEFAULT_MODEL,
    base_url_hint=BASE_URL_HINT,
    make_codec=_codec,
    make_transport=_transport,
    classify_error=classify_openai_failure,
    lab=_lab,
    options=frozenset(),
)
