"""The real Python readers of the gate's output: the installed libraries themselves, each as
a client uses it, reading over HTTP (no port of their rules, unlike `readers`).

- `openai-chat`: openai-python, `client.chat.completions.create(stream=True)`, every chunk
  accumulated by the SDK's own `ChatCompletionStreamState` (what `chat.completions.stream`
  does), its final completion (or, where the stream raised, its snapshot then).
- `openai-responses`: `client.responses.stream(...)`, its final response (or its snapshot).
- `anthropic`: `client.messages.stream(...)`, `get_final_message()` (or its snapshot).
- `genai-aiohttp` and `genai-httpx2`: google-genai's `generate_content_stream`, the function
  calls a client collects from the chunks (`chunk.function_calls`), over aiohttp (its
  default) and over an `httpx2` client (the one `gated_client()` gives it).
- `litellm-openai` and `litellm-anthropic`: `litellm.acompletion(..., stream=True)` with
  `api_base` at the server, the chunks accumulated by `litellm.stream_chunk_builder`
  (through the transport, the openai route is given an `AsyncOpenAI` over `gated_client()`;
  litellm's own HTTP clients are `httpx`, not `httpx2`, so its anthropic route has none).

Every client runs with `max_retries=0` and a placeholder key, against loopback only.
litellm reads its cost map from the package (`LITELLM_LOCAL_MODEL_COST_MAP`, set before
it is imported), runs without callbacks or telemetry, and is told a neutral model name (a
llama one makes it fetch a tokenizer from the Hugging Face hub; `HF_HUB_OFFLINE` is set
too). `loopback_only` refuses, and counts, any connection beyond loopback.

`Upstream` serves given bytes to any request (and keeps the requests); `ROUTES` are the
three ways a reader gets them: `direct` (from the upstream), `proxy` (through `lockgate
proxy`, in process, in front of the upstream) and `transport` (`gated_client()` in the
reader's process). `read` returns what the reader ended with (`Read`: the calls it holds,
with their argument text where it keeps one, its text, what it raised); `findings`
compares that with what the gate released.

The package's modules: `base` (`Read` and the constants), `routes` (the upstream, the proxy,
the endpoint), `clients` (the readers), `findings` and `loopback`; every name is imported
from here. The environment above is set before any of them is imported.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_TELEMETRY", "False")
os.environ.setdefault("LITELLM_LOG", "CRITICAL")
# litellm counts tokens where a stream reports none, with a tokenizer it would fetch from the
# Hugging Face hub for some model names (llama, command-r): never (and the model names it is
# given are neutral ones).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from .base import KEY, LITELLM_MODEL, LITELLM_WARNING, MODEL, ROUTES, UNPARSED, HeldCall, Read
from .clients import READERS, Reader, Reading, litellm_available, read
from .findings import findings, released_calls, strict_problem
from .loopback import REFUSED, loopback_only
from .routes import Endpoint, Upstream, upstream_and_proxy

__all__ = [
    "KEY",
    "LITELLM_MODEL",
    "LITELLM_WARNING",
    "MODEL",
    "READERS",
    "REFUSED",
    "ROUTES",
    "UNPARSED",
    "Endpoint",
    "HeldCall",
    "Read",
    "Reader",
    "Reading",
    "Upstream",
    "findings",
    "litellm_available",
    "loopback_only",
    "read",
    "released_calls",
    "strict_problem",
    "upstream_and_proxy",
]
