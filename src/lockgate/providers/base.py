"""The seams a provider implements: a request encoder and a stream decoder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..conversation import Message, ToolSpec
from ..events import StreamEvent
from ..sse import ServerSentEvent


class StreamDecoder(Protocol):
    """Turns one provider's SSE events into normalized events (stateless or per response)."""

    def decode(self, event: ServerSentEvent) -> StreamEvent | None:
        """Return the normalized event, or None for pure progress. Raise ResponseFailure
        (kind malformed_event) for bytes that are not a valid event of this provider."""
        ...


class ProviderCodec(Protocol):
    """Encodes portable history for one provider and makes decoders for its streams.

    `producer` names the provider and model (e.g. `openai-responses:gpt-5`); assistant
    messages are stamped with it, and native items (reasoning) are replayed only to the
    same producer.
    """

    @property
    def producer(self) -> str: ...

    def encode(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        """Build the native request body (without transport concerns)."""
        ...

    def new_decoder(self) -> StreamDecoder:
        """A decoder for one response stream."""
        ...
