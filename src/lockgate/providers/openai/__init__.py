"""What the OpenAI Responses and Chat providers share: the official `openai` SDK as
transport (`transport.py`, imported only when a transport is made), OpenAI error bodies
(`errors.py`), what a model name implies (`models.py`), the history rules of both encoders
(`history.py`), and the registry settings below."""

from __future__ import annotations

KEY_VARIABLE = "OPENAI_API_KEY"
BASE_URL_VARIABLE = "OPENAI_BASE_URL"
DEFAULT_MODEL = "gpt-4.1-mini"
BASE_URL_HINT = "https://api.openai.com/v1"
