"""The codec seam: what a provider gives the client for one protocol.

A `ProviderCodec` encodes the portable history into a native request and makes a
`StreamDecoder` per response stream, which turns that protocol's SSE events into normalized
events (`events.StreamEvent`). The client and the gate speak only these; each provider
implements them in its own folder (`providers/<name>/codec.py`, `decoder.py`).

A protocol whose body is not SSE (Bedrock's `application/vnd.amazon.eventstream`) is a
`FramedCodec`: it also makes the `Framer` that splits its body into the events its decoder
reads; every other codec's body is framed by the bounded SSE decoder (`sse.SSEDecoder`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from .conversation import Message, ToolSpec
from .events import StreamEvent
from .sse import ServerSentEvent

__all__ = ["FramedCodec", "Framer", "ProviderCodec", "StreamDecoder"]


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

    def canonical_data(self) -> bytes | None:
        """Called right after `decode` (by the gating engine): the data clients should read
        in place of that event's data, when it states something the common readers read
        differently and the decoder read in one way (Chat's id or name sent again, identical,
        on a later fragment of the same call: openai-python concatenates it; a call without
        an index, which some readers cannot read); None (nearly always) keeps the event as
        it came. Only the event just decoded is rewritten, and
        only so that every reader reads what the decoder read."""
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


class Framer(Protocol):
    """Splits one response body into the events a decoder reads (`sse.SSEDecoder` is the
    SSE one), bounded while it accumulates. Raise ResponseFailure for invalid bytes."""

    @property
    def cut(self) -> bool:
        """After `finish`: the body ended inside an event (a framer may raise instead)."""
        ...

    def feed(self, chunk: bytes) -> list[ServerSentEvent]: ...

    def finish(self) -> list[ServerSentEvent]: ...


@runtime_checkable
class FramedCodec(ProviderCodec, Protocol):
    """A codec whose bodies are not SSE: it makes the framer of each response body."""

    def new_framer(self, max_event_bytes: int) -> Framer:
        """A framer for one response body, bounding one event by `max_event_bytes`."""
        ...
