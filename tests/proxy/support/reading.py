"""Reading the engine's output as a client does: its frames and events, keep-alives counted
or left out, the canonical form, the events that carry a tool call, and whether it ends with
the protocol's refusal."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from lockgate.gateway import Gateway
from lockgate.sse import SSEDecoder, SSEFramer, canonical_frame


def frames(data: bytes) -> list[Any]:
    """The raw frames of `data` and its tail (`SSEFramer`, checked against `SSEDecoder` in
    test_framer.py)."""
    framer = SSEFramer(1 << 30)
    found = framer.feed(data)
    found.extend(framer.finish())
    return found


def without_keepalives(data: bytes, gateway: Gateway) -> list[tuple[str | None, object]]:
    """The events a client reads of `data`, in order: (name, data as a JSON value, or the
    bytes where it is not JSON), keep-alives (comment-only frames, the protocol's keep-alive
    events) and the events the gateway skips unread left out. Equal for a stream and its
    canonical re-framing (`sse.canonical_frame` writes equal JSON on one line)."""
    events: list[tuple[str | None, object]] = []
    for frame in frames(data):
        event = frame.event
        if event is None or gateway.is_keepalive(event) or gateway.skipped(event):
            continue
        try:
            value: object = json.loads(event.data)
        except ValueError:
            value = event.data
        events.append((event.event, value))
    return events


def as_released(
    events: list[tuple[str | None, object]], provider: str
) -> list[tuple[str | None, object]]:
    """The events (`without_keepalives`) a client reads of an accepted upstream stream: the
    upstream's, with the calls in Chat's canonical form (docs/wire/chat.md §5), written here
    apart from the decoder: a call's id or name stated again, identical, on a later fragment
    is left out, a whole call without an index is given its position as its index (and the
    type `function` where it states none), and arguments sent as a JSON value go out as its
    compact text."""
    if provider != "chat":
        return events
    calls: list[dict[str, object]] = []  # the id and name each call stated, by position
    released: list[tuple[str | None, object]] = []
    for name, value in events:
        value = json.loads(json.dumps(value)) if isinstance(value, dict) else value
        choices = value.get("choices") if isinstance(value, dict) else None
        for choice in choices if isinstance(choices, list) else ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            fragments = delta.get("tool_calls") if isinstance(delta, dict) else None
            for fragment in fragments if isinstance(fragments, list) else ():
                index = fragment.get("index")
                if index is None:
                    index = fragment["index"] = len(calls)
                    if fragment.get("type") is None:
                        fragment["type"] = "function"
                if index == len(calls):
                    calls.append({})
                stated = calls[index]
                function = fragment.get("function") or {}
                if isinstance(function.get("arguments"), dict | list):  # a value: its text
                    function["arguments"] = json.dumps(
                        function["arguments"], ensure_ascii=False, separators=(",", ":")
                    )
                for holder, key in ((fragment, "id"), (function, "name")):
                    given = holder.get(key)
                    if given and stated.get(key) == given:
                        del holder[key]
                    elif given:
                        stated[key] = given
        released.append((name, value))
    return released


def canonical(raw: bytes | Iterable[bytes]) -> bytes:
    """What a client receives of an accepted upstream body that holds no keep-alive: each of
    its events in the canonical form (`sse.canonical_frame`), nothing else. The same bytes as
    the body when every frame is canonical already (Responses, Chat and Anthropic as the lab
    renders them); Gemini's CRLF frames come out with LF line ends."""
    body = raw if isinstance(raw, bytes) else b"".join(raw)
    return b"".join(
        canonical_frame(frame.event) for frame in frames(body) if frame.event is not None
    )


def _blank_keepalive(gateway: Gateway) -> bool:
    """Whether the gateway's keep-alive is a bare blank line (Gemini's: its clients read no
    SSE comment), which a framer merges into the frame that follows it."""
    return not gateway.keepalive().strip(b"\r\n")


# One canonical event frame (what the engine sends): an optional `event:` line with a
# printable ASCII name, one `data:` line, LF line ends; and none of the characters that
# some readers split or strip lines on.
_CANONICAL = re.compile(rb"(?:event: [!-~]+\n)?data: [^\n\r]*\n\n")
_AMBIGUOUS = re.compile(rb"[\x00\x0b\x0c\x1c-\x1e]|\xc2\x85|\xe2\x80[\xa8\xa9]|\xef\xbb\xbf")


def not_canonical(data: bytes, gateway: Gateway) -> list[bytes]:
    """The pieces of the engine's output that are neither the gateway's keep-alive nor one
    canonical event frame (and any tail no blank line ended). A blank-line keep-alive
    (Gemini's) is read as what it is wherever the framer put it: before a frame, or alone."""
    framer = SSEFramer(1 << 30)
    found = framer.feed(data)
    found.extend(framer.finish())
    blank = gateway.keepalive() if _blank_keepalive(gateway) else None
    odd = []
    for frame in found:
        raw = frame.raw
        if raw == gateway.keepalive():
            continue
        if blank is not None:
            raw = raw.lstrip(blank)
            if not raw:
                continue  # keep-alives only
        if _CANONICAL.fullmatch(raw) is None or _AMBIGUOUS.search(raw):
            odd.append(frame.raw)
    tail = framer.tail
    if blank is not None:
        tail = tail.lstrip(blank)
    if tail or data.startswith(b"\xef\xbb\xbf"):
        odd.append(tail or data[:3])
    return odd


_LINES = re.compile(rb"\r\n|\r|\n")


def _blank_keepalives(data: bytes) -> int:
    """Keep-alives where a keep-alive is a blank line: every frame of comments only (the
    engine sends one keep-alive for it) and every blank line that ends no frame."""
    count = 0
    content = False  # a line of the frame so far is a field, not a comment
    for line in _LINES.split(data)[:-1]:  # the last piece ends no line
        if line:
            content = content or not line.startswith(b":")
        elif content:
            content = False  # the blank line that ends a frame
        else:
            count += 1  # it ends a frame of comments, or stands on its own
    return count


def keepalive_count(data: bytes, gateway: Gateway) -> int:
    """The keep-alives in `data`: comment-only frames, the protocol's keep-alive events;
    where the keep-alive is a blank line (Gemini), also every blank line that ends no
    frame."""
    if _blank_keepalive(gateway):
        return _blank_keepalives(data)
    return sum(
        1
        for frame in frames(data)
        if frame.keepalive or (frame.event is not None and gateway.is_keepalive(frame.event))
    )


_TOOL_TYPES = frozenset(
    {
        "function_call",
        "tool_use",
        "server_tool_use",
        "mcp_tool_use",
        "input_json_delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
    }
)
_TOOL_FINISHES = frozenset({"tool_calls", "tool_use", "function_call"})
# Gemini's parts that carry an action: the client's call, and what the provider ran.
_GEMINI_ACTIONS = (
    "functionCall",
    "executableCode",
    "codeExecutionResult",
    "toolCall",
    "toolResponse",
)


def _tool_marker(value: object) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            kind = item.get("type")
            if isinstance(kind, str) and (
                kind in _TOOL_TYPES
                or kind.endswith(("_call", "_tool_result"))
                or "function_call" in kind
            ):
                return True
            if item.get("tool_calls") or item.get("function_call"):
                return True
            if item.get("finish_reason") in _TOOL_FINISHES:
                return True
            if item.get("stop_reason") in _TOOL_FINISHES:
                return True
            if any(item.get(key) is not None for key in _GEMINI_ACTIONS):
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def decoded_events(data: bytes) -> list[Any]:
    """The events an SSE client decodes from `data` (lockgate's `SSEDecoder`)."""
    decoder = SSEDecoder(1 << 30)
    events = decoder.feed(data)
    events.extend(decoder.finish())
    return events


def tool_events(data: bytes) -> list[bytes]:
    """The data of every event in `data` that carries a tool call or an action."""
    found = []
    for event in decoded_events(data):
        try:
            payload = json.loads(event.data)
        except ValueError:
            continue
        if _tool_marker(payload):
            found.append(event.data)
    return found


def ends_with_refusal(data: bytes, provider: str) -> bool:
    """The last event is the protocol's stream error, and nothing follows it."""
    found = frames(data)
    if not found or found[-1].event is None or not data.endswith(found[-1].raw):
        return False
    event = found[-1].event
    payload = json.loads(event.data)
    if provider == "chat":
        return event.event is None and isinstance(payload.get("error"), dict)
    if provider == "gemini":  # Google's error object alone, in a frame of data only
        error = payload.get("error")
        return (
            event.event is None
            and list(payload) == ["error"]
            and isinstance(error, dict)
            and {"code", "message", "status"} <= set(error)
        )
    if provider == "responses":  # `error` (the SDKs raise on it), then `response.failed`
        if len(found) < 2 or found[-2].event is None or found[-2].event.event != "error":
            return False
        error = json.loads(found[-2].event.data).get("error")
        response = payload.get("response")
        return (
            event.event == "response.failed"
            and isinstance(error, dict)
            and isinstance(response, dict)
            and response.get("status") == "failed"
            and response.get("error") == {"code": error["code"], "message": error["message"]}
        )
    return (
        event.event == "error"
        and payload.get("type") == "error"
        and isinstance(payload.get("error"), dict)
    )
