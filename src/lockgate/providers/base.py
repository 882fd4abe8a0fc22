"""The seams a provider implements, and the registry entry that names them.

A provider is one folder under `providers/`: a request encoder and a stream decoder (its
`ProviderCodec`), a transport (the official SDK, `max_retries=0`, raw body), an error
classifier for failed openings, and a lab renderer that turns the lab's neutral replies into
its native bytes. `Provider` names them all; `providers/__init__.py` lists one entry per
provider. The gate, the client, the retry owner, the SSE decoder, the loop and the display
know nothing of any one provider.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..conversation import Message, ToolSpec
from ..errors import OpenFailure
from ..events import StreamEvent
from ..sse import ServerSentEvent

if TYPE_CHECKING:
    import httpx2

    from ..lab.protocol import LabProtocol
    from ..transport import Transport


class StreamDecoder(Protocol):
    """Turns one provider's SSE events into normalized events, for one response stream."""

    def decode(self, event: ServerSentEvent) -> Sequence[StreamEvent]:
        """The normalized events of one SSE event (none for pure progress). Raise
        ResponseFailure (kind malformed_event) for bytes that are not a valid event of this
        provider."""
        ...

    def end_of_stream(self) -> Sequence[StreamEvent]:
        """The body ended cleanly (no reset). A protocol whose end is the end of the body
        may complete here; others return nothing (the client then reports the end)."""
        ...


class ProviderCodec(Protocol):
    """Encodes portable history for one provider and makes decoders for its streams.

    `producer` names the provider and model (e.g. `responses:gpt-5`); assistant messages
    are stamped with it, and native items (reasoning, provider output) are replayed only to
    the same producer.
    """

    @property
    def producer(self) -> str: ...

    def encode(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        """Build the native request body (without transport concerns)."""
        ...

    def new_decoder(self) -> StreamDecoder:
        """A decoder for one response stream."""
        ...


Continuation = Literal["stateless", "native"]


DEFAULT_MAX_OUTPUT_TOKENS = 2048  # every provider's output-token cap unless told


@dataclass(frozen=True, slots=True)
class CodecOptions:
    """What a codec is built from. Providers honour the options they list in
    `Provider.options`; the CLI refuses the others."""

    model: str
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    continuation: Continuation = "stateless"  # Responses
    encrypted_reasoning: bool | None = None  # Responses: None = decide from the model name
    thinking_budget: int | None = None  # Anthropic: extended thinking with this budget


HttpBackend = Literal["aiohttp", "httpx"]


@dataclass(frozen=True, slots=True)
class TransportOptions:
    """What a transport is built from. `timeout` bounds connecting and sending;
    `read_timeout` an optional per-read limit in the SDK's HTTP client (default none: the
    client's silence watchdog bounds every wait, and a per-read timer costs CPU on every
    read; if set, keep it above the client's idle
    timeout); `trust_env=False` ignores proxy variables (the lab's own loopback server);
    `backend`: the SDK's aiohttp-backed HTTP client (default, the faster) or its httpx one;
    `http_transport` replaces the network (tests: an `httpx2.MockTransport`)."""

    api_key: str
    base_url: str | None = None
    timeout: float = 30.0
    read_timeout: float | None = None
    trust_env: bool = True
    backend: HttpBackend = "aiohttp"
    http_transport: httpx2.AsyncBaseTransport | None = None

    def __post_init__(self) -> None:
        from ..credentials import api_key_problem
        from ..http import base_url_problem
        from ..transport import check_timeout

        problem = api_key_problem(self.api_key)  # refused before any request, never echoed
        if problem is not None:
            raise ValueError(f"api_key: {problem}")
        if self.base_url is not None and (problem := base_url_problem(self.base_url)):
            raise ValueError(f"base_url: {problem}")
        check_timeout(self.timeout, "timeout")
        if self.read_timeout is not None:
            check_timeout(self.read_timeout, "read_timeout")
        if self.backend not in ("aiohttp", "httpx"):
            raise ValueError("backend must be 'aiohttp' or 'httpx'")


ErrorClassifier = Callable[[int, object, Mapping[str, str]], OpenFailure]


@dataclass(frozen=True, slots=True)
class Provider:
    """One registry entry: everything the CLI, the lab and the tests need to speak one
    protocol. Factories import the SDK only when called, so that `--help`, usage errors and
    the in-process lab start fast."""

    name: str
    title: str
    key_variable: str
    base_url_variable: str  # the SDK's own variable for the base URL (used without --base-url)
    default_model: str
    base_url_hint: str  # what `--base-url` looks like for this provider
    make_codec: Callable[[CodecOptions], ProviderCodec]
    make_transport: Callable[[TransportOptions], Transport]
    classify_error: ErrorClassifier
    lab: Callable[[], LabProtocol]  # its lab renderer (imported when the lab runs)
    options: frozenset[str] = frozenset()  # CodecOptions fields beyond model it honours
