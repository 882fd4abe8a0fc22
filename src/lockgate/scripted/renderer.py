"""The seam through which a protocol renders the lab's neutral replies
(`providers/<name>/render.py`), and the one walk over a reply's parts every renderer uses.

A renderer turns a `Reply` into its protocol's native events and bytes, and knows the rest
of the protocol's wire that the scripted server and the lab need: the request path, error
bodies, rate-limit headers, the non-streaming answer, where a tool result goes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Literal, NoReturn, Protocol, runtime_checkable

from .reply import (
    Broken,
    Call,
    Compaction,
    CustomCall,
    OpeningError,
    Part,
    ProviderTool,
    Refuse,
    Reply,
    Say,
    ShellCall,
    Think,
    responses_only,
)

Frame = Mapping[str, Any]  # a native event, or {"raw": "bytes to send verbatim"}

SSE_MEDIA_TYPE = "text/event-stream"


def typed_sse_frame(event: Frame) -> bytes:
    """A protocol whose events carry their `type` (Responses, Anthropic): `event: <type>`
    and the compact JSON as `data`; `{"raw": …}` verbatim."""
    if "raw" in event and "type" not in event:
        return str(event["raw"]).encode()
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


class Renderer(Protocol):
    """One protocol's side of the lab and of `lockgate serve`."""

    @property
    def provider(self) -> str:
        """The registry name (`responses`, `chat`, `anthropic`)."""
        ...

    @property
    def path(self) -> str:
        """The POST path the scripted server answers (e.g. `/v1/responses`), as a client
        of the lab's model asks it."""
        ...

    @property
    def stream_query(self) -> str:
        """The query string a client of the lab's model adds to `path` for a stream (Gemini:
        `alt=sse`; "" for a protocol that asks in the body)."""
        ...

    def answers(self, path: str) -> bool:
        """Whether a POST to `path` (its query string included) is this protocol's request
        (a protocol that names the model in the path matches more than one path)."""
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

    def is_streaming(self, path: str, body: object) -> bool:
        """Whether a request (its path and JSON body) asks for a stream."""
        ...

    def tool_result(self, request: Mapping[str, Any], call_id: str) -> str | None:
        """The result a request sends back for `call_id`, if it is where the protocol
        wants it (right after its call / first in the next user message); else None."""
        ...


@runtime_checkable
class FramedRenderer(Protocol):
    """A renderer whose streamed body is not SSE (Bedrock's binary event stream) states its
    media type; every other renderer's body is `text/event-stream`."""

    @property
    def media_type(self) -> str: ...


@runtime_checkable
class WebSocketRenderer(Protocol):
    """A protocol with a WebSocket mode (the Responses API's): the scripted server answers
    an upgrade at its path and plays each request message's turn as text messages."""

    def websocket_request(self, message: object) -> dict[str, Any] | None:
        """The request a client message carries (None: the message asks for no response,
        such as `response.processed`)."""
        ...

    def websocket_error(
        self, status: int, body: Mapping[str, Any], headers: Mapping[str, str]
    ) -> dict[str, Any]:
        """The message that answers a request with an HTTP error (`status`, its body)."""
        ...

    def ends_response(self, message: bytes) -> bool:
        """Whether a server message ends its response (a body that ends without one is
        closed with 1000: the WebSocket's clean end mid-response)."""
        ...


@runtime_checkable
class RoutedRenderer(Protocol):
    """A renderer whose server answers more than one wire (Bedrock: Converse, and InvokeModel
    for Anthropic models) names the renderer of each request path (`routed`)."""

    def for_path(self, path: str) -> Renderer: ...


def routed(renderer: Renderer, path: str) -> Renderer:
    """The renderer that answers a request to `path` (`renderer` itself but for a
    `RoutedRenderer`)."""
    return renderer.for_path(path) if isinstance(renderer, RoutedRenderer) else renderer


def leading_results(
    request: Mapping[str, Any],
    has_call: Callable[[Mapping[str, Any]], bool],
    is_result: Callable[[Any], bool],
) -> list[Any]:
    """Where a content-block protocol (Anthropic, Bedrock) keeps a call's result: the
    result blocks that open the user message right after the first assistant message with
    the call (`has_call`). None there (no such messages, or a result after other content in
    that user message): an empty list."""
    messages = list(request.get("messages", []))
    for index, message in enumerate(messages):
        if message.get("role") != "assistant" or not has_call(message):
            continue
        following = messages[index + 1] if index + 1 < len(messages) else {}
        content = following.get("content")
        if following.get("role") != "user" or not isinstance(content, list):
            return []
        leading = 0
        while leading < len(content) and is_result(content[leading]):
            leading += 1
        if any(is_result(block) for block in content[leading:]):
            return []  # a result after other content
        return content[:leading]
    return []


def media_type(renderer: Renderer) -> str:
    """The content type of `renderer`'s streamed body."""
    return renderer.media_type if isinstance(renderer, FramedRenderer) else SSE_MEDIA_TYPE


class StreamFlagRenderer:
    """What a protocol with one request path and a `stream` flag in its body answers (the
    OpenAI protocols, Anthropic): mixed into its renderer, which sets `path`."""

    path: str
    stream_query = ""  # the body asks for a stream

    def answers(self, path: str) -> bool:
        return path.split("?", 1)[0] == self.path

    def is_streaming(self, path: str, body: object) -> bool:
        return isinstance(body, dict) and body.get("stream") is True


class ReplyBuilder(Protocol):
    """What a renderer does with each kind of reply part (`number`: the part's 1-based
    position, for the ids a protocol derives from it), and with the reply's ending."""

    def say(self, part: Say, number: int) -> None: ...

    def think(self, part: Think, number: int) -> None: ...

    def refuse(self, part: Refuse, number: int) -> None: ...

    def call(self, part: Call, number: int) -> None: ...

    def custom_call(self, part: CustomCall, number: int) -> None: ...

    def shell_call(self, part: ShellCall, number: int) -> None: ...

    def compaction(self, part: Compaction, number: int) -> None: ...

    def provider_tool(self, part: ProviderTool, number: int) -> None: ...

    def broken(self, number: int) -> None:
        """A frame whose JSON is cut off."""
        ...

    def end(self, reply: Reply) -> None:
        """The terminal event `reply.ending` asks for (none for `open`)."""
        ...


def walk(reply: Reply, builder: ReplyBuilder) -> None:
    """Every part the reply sends (up to a cut call), in order, then its ending."""
    for number, part in enumerate(reply.sent_parts, start=1):
        if isinstance(part, Say):
            builder.say(part, number)
        elif isinstance(part, Think):
            builder.think(part, number)
        elif isinstance(part, Refuse):
            builder.refuse(part, number)
        elif isinstance(part, Call):
            builder.call(part, number)
        elif isinstance(part, CustomCall):
            builder.custom_call(part, number)
        elif isinstance(part, ShellCall):
            builder.shell_call(part, number)
        elif isinstance(part, Compaction):
            builder.compaction(part, number)
        elif isinstance(part, ProviderTool):
            builder.provider_tool(part, number)
        elif isinstance(part, Broken):
            builder.broken(number)
    builder.end(reply)


class FunctionCallsOnly:
    """Mixed into the `ReplyBuilder` of a protocol that has only function calls, without
    namespaces, and no compaction items (Chat, Anthropic, Gemini): the parts only the
    Responses protocol has raise ValueError naming the protocol (scenarios that use them
    run on Responses only). Its `call` checks each call with `plain`."""

    protocol_name: ClassVar[str]

    def plain(self, part: Call) -> None:
        """Raise if `part` is a call this protocol cannot express (one in a namespace)."""
        what = responses_only(part)
        if what is not None:
            _inexpressible(self.protocol_name, what)

    def custom_call(self, part: CustomCall, number: int) -> NoReturn:
        _inexpressible(self.protocol_name, responses_only(part))

    def shell_call(self, part: ShellCall, number: int) -> NoReturn:
        _inexpressible(self.protocol_name, responses_only(part))

    def compaction(self, part: Compaction, number: int) -> NoReturn:
        _inexpressible(self.protocol_name, responses_only(part))


def only_function_calls(parts: Iterable[Part], protocol_name: str) -> None:
    """Raise ValueError if any of `parts` is one `protocol_name` cannot express (for a
    renderer's answer that does not `walk` the reply)."""
    for part in parts:
        what = responses_only(part)
        if what is not None:
            _inexpressible(protocol_name, what)


def _inexpressible(protocol_name: str, what: str | None) -> NoReturn:
    raise ValueError(f"{protocol_name} cannot express {what}: a Responses-only reply part")
