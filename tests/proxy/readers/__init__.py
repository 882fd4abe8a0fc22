"""SSE readers that disagree, and the naive clients that act on what they read.

The gating engine judges a stream with lockgate's own SSE decoder; a client reads the
engine's output with its own. Where two readers disagree on the same bytes (a line starting
with U+FEFF, a comment holding a separator `str.splitlines` splits on, an Anthropic frame
without `event:`, a JSON body where SSE was asked for), a client can read an event, and a
tool call in it, that the gate never saw. These readers are the clients' own rules, each
ported from the source named in its docstring (or, where the library is installed here,
called directly), so that a test can read the engine's output as each of them does:
bytes in (the reads, in order), `ReadEvent`s out, never raising on odd input (a reader
that would raise stops there: what it read until then is what its client saw).

The readers live in the modules of this package, by kind: `base` (what they share),
`evil` (a call the gate never released), `in_python`, `typescript` (the ports), `compare`
(`READERS`, and comparing their reads) and `naive` (the naive clients); every name is
imported from here.

`READERS` lists them with the protocols they read. `calls_seen` is the naive client of
one protocol: every tool call a careless agent could act on in what a reader read (the
lab's naive client, `lockgate.lab.via_proxy.calls_seen`, reads with lockgate's decoder
only). `unreleased` compares what it saw with what the gate released.

Sources read (the versions read, pinned nowhere; the npm ports were checked against the real
packages run with node, see `test_the_typescript_ports_read_as_the_real_sdks`):

- `openai` npm 6.49.0: `core/streaming.js` (`_iterSSEMessages`, `iterSSEChunks`,
  `SSEDecoder`), `internal/decoders/line.js` (`LineDecoder`, `findDoubleNewlineIndex`),
  `internal/utils/bytes.js` (`decodeUTF8`).
- `@anthropic-ai/sdk` npm 1.16.0: `core/streaming.js` (`_iterSSEMessages`, `fromSSEResponse`).
- `litellm` 1.110.2 (PyPI wheel): `llms/custom_httpx/sse_lines.py`,
  `llms/anthropic/chat/handler.py` (`make_call`, `ModelResponseIterator.__anext__`,
  `_parse_sse_data`, `_handle_accumulated_json_chunk`, `chunk_parser`),
  `litellm_core_utils/json_fragment_accumulator.py`.
- `@google/genai` npm 1.30.0, as Gemini CLI 0.61.0 bundles it (`bundle/chunk-*.js`,
  `ApiClient.processStreamResponse`, `responseLineRE`, `generateContentStreamInternal`).
- Installed and called directly: `httpx2` 2.16.2 (`Response.iter_lines`: `str.splitlines`
  rules), `openai` 3.57.0 `_streaming.SSEDecoder`, `anthropic` 2.16.0
  `_streaming.SSEDecoder`, `google-genai` 3.6.1 `_api_client` (`HttpResponse.
  _iter_response_stream`, `_aiter_aiohttp_lines`, `_RawJsonLineBuffer`; its aiohttp loop
  ported around them), `lockgate.sse.SSEDecoder`.
- The WHATWG HTML specification, server-sent events, "Interpreting an event stream".
"""

from __future__ import annotations

from .base import Chunks, Reader, ReadEvent
from .compare import READERS, disagreements, payloads, read_all, readers_for
from .evil import EVIL, evil_data
from .in_python import (
    read_anthropic_python,
    read_genai_aiohttp,
    read_genai_python,
    read_json_lines,
    read_litellm_anthropic,
    read_lockgate,
    read_openai_python,
    read_splitlines_data_lines,
    read_splitlines_events,
    read_whatwg,
)
from .naive import Audit, SeenCall, audit, calls_seen, unreleased
from .typescript import read_anthropic_node, read_genai_node, read_openai_node

__all__ = [
    "EVIL",
    "READERS",
    "Audit",
    "Chunks",
    "ReadEvent",
    "Reader",
    "SeenCall",
    "audit",
    "calls_seen",
    "disagreements",
    "evil_data",
    "payloads",
    "read_all",
    "read_anthropic_node",
    "read_anthropic_python",
    "read_genai_aiohttp",
    "read_genai_node",
    "read_genai_python",
    "read_json_lines",
    "read_litellm_anthropic",
    "read_lockgate",
    "read_openai_node",
    "read_openai_python",
    "read_splitlines_data_lines",
    "read_splitlines_events",
    "read_whatwg",
    "readers_for",
    "unreleased",
]
