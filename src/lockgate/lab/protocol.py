"""What a provider's lab renderer offers the neutral lab (`providers/<name>/lab.py`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from .reply import OpeningError, Reply
    from .scenario import Scenario

Frame = Mapping[str, Any]  # a native event, or {"raw": "bytes to send verbatim"}


def typed_sse_frame(event: Frame) -> bytes:
    """A protocol whose events carry their `type` (Responses, Anthropic): `event: <type>`
    and the compact JSON as `data`; `{"raw": …}` verbatim."""
    if "raw" in event and "type" not in event:
        return str(event["raw"]).encode()
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


class LabProtocol(Protocol):
    """One protocol's side of the lab and of `lockgate serve`."""

    @property
    def provider(self) -> str:
        """The registry name (`responses`, `chat`, `anthropic`)."""
        ...

    @property
    def path(self) -> str:
        """The one POST path the scripted server answers (e.g. `/v1/responses`)."""
        ...

    def base_url(self, origin: str) -> str:
        """The base URL a client of this protocol is given for a server at `origin`
        (`http://127.0.0.1:PORT`), as its SDK takes it."""
        ...

    def events(self, reply: Reply) -> list[Frame]:
        """The native stream events of a reply."""
        ...

    def frame(self, event: Frame) -> bytes:
        """One native event as SSE bytes (`{"raw": …}` verbatim)."""
        ...

    def endless_event(self, kind: Literal["text", "unknown"]) -> Frame:
        """An event repeated forever by the `endless` fault."""
        ...

    def completion(self, reply: Reply) -> dict[str, Any]:
        """The non-streaming JSON response for the same reply (`stream: false`)."""
        ...

    def error_body(self, error: OpeningError) -> dict[str, Any]:
        """The protocol's JSON error body for an opening error."""
        ...

    def reset_headers(self, seconds: float) -> dict[str, str]:
        """Rate-limit headers saying the request limit is exhausted and resets in
        `seconds` (the token limit with capacity left)."""
        ...

    def is_streaming(self, body: object) -> bool:
        """Whether a request body asks for a stream."""
        ...

    def tool_result(self, request: Mapping[str, Any], call_id: str) -> str | None:
        """The result a request sends back for `call_id`, if it is where the protocol
        wants it (right after its call / first in the next user message); else None."""
        ...

    @property
    def scenarios(self) -> Sequence[Scenario]:
        """This protocol's own scenarios (its quirks), beside the neutral ones."""
        ...
