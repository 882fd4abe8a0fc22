"""OpenAI Responses (`POST {base}/responses`): OpenAI, and Responses-compatible gateways."""

from __future__ import annotations

from ..openai import openai_provider
from .codec import ResponsesCodec
from .options import ResponsesOptions

PROVIDER = openai_provider(
    "responses", "OpenAI Responses", ResponsesCodec.from_options, ResponsesOptions
)
