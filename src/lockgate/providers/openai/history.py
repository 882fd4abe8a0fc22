"""History rules the Responses and Chat encoders share."""

from __future__ import annotations

from ...conversation import Message


def answered_call(message: Message, open_calls: set[str]) -> str:
    """The id of the call a tool result answers, which it removes from `open_calls` (a
    call is answered once). ValueError when the result does not follow its call."""
    call_id = message.tool_call_id or ""
    if call_id not in open_calls:
        raise ValueError(f"tool result {call_id!r} does not follow its call")
    open_calls.discard(call_id)
    return call_id
