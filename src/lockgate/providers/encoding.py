"""What the request encoders of the content-block protocols share (Anthropic Messages and
Bedrock Converse; Gemini shares the walk over the history).

- `route_history`: every message of the portable history to its handler by role, in order
  (system messages are skipped: each protocol puts them top level).
- `replayed_blocks`: an assistant message as the blocks it was made of, for the producer
  that made it; else only its text and its calls.
- `BlockMessages`: the alternating user / assistant list: same-role messages merged, every
  result answering one assistant message in ONE user message, results first, and a result
  that answers no open call, a second result for one call, or a call left without a result
  refused (ValueError) before any request is made. Each protocol names its blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..conversation import CallPart, Message, NativeItem, RefusalPart, TextPart, ToolCall

__all__ = ["ERROR_PREFIX", "BlockMessages", "replayed_blocks", "route_history"]

ERROR_PREFIX = "error:"  # the loop's words for a call that failed, or was never run

Block = dict[str, Any]


def route_history(
    history: Sequence[Message],
    *,
    user: Callable[[str], None],
    tool_result: Callable[[Message], None],
    assistant: Callable[[Message], None],
) -> None:
    """Each non-system message of `history` to its handler, in order."""
    for message in history:
        if message.role == "system":
            continue
        if message.role == "user":
            user(message.content)
        elif message.role == "tool":
            tool_result(message)
        else:
            assistant(message)


def replayed_blocks(
    message: Message,
    producer: str,
    *,
    text: Callable[[str], Block],
    call: Callable[[ToolCall], Block],
) -> list[Block]:
    """Its original content for the same producer, else the portable text and calls."""
    original = message.native_for(producer)
    if not original:
        portable = message.content or message.refusal
        blocks = [text(portable)] if portable else []
        blocks.extend(call(tool_call) for tool_call in message.tool_calls)
        return blocks
    calls = {tool_call.id: tool_call for tool_call in message.tool_calls}
    replayed: list[Block] = []
    for part in original:
        if isinstance(part, NativeItem):
            replayed.append(dict(part.item))
        elif isinstance(part, CallPart):
            named = calls.get(part.call_id)
            if named is None:
                raise ValueError(
                    f"assistant output names call {part.call_id!r}, not among its calls"
                )
            replayed.append(call(named))
        elif isinstance(part, TextPart | RefusalPart) and part.text:
            replayed.append(text(part.text))
    return replayed


class BlockMessages:
    """Builds the alternating message list; a protocol says how its blocks look."""

    call_name = "tool call"  # how the protocol names a call block, in errors
    result_name = "tool result"  # and a result block

    def __init__(self) -> None:
        self.messages: list[Block] = []
        self.open_calls: list[str] = []  # call ids of the last assistant, unanswered

    # --- the protocol's blocks ---------------------------------------------------------

    def text_block(self, text: str) -> Block:
        raise NotImplementedError

    def call_ids(self, blocks: list[Block]) -> list[str]:
        """The ids of the calls among `blocks` that want a result."""
        raise NotImplementedError

    def result_block(self, call_id: str, observation: str, error: bool) -> Block:
        raise NotImplementedError

    def is_result(self, block: Block) -> bool:
        raise NotImplementedError

    # --- the list ---------------------------------------------------------------------

    def _last(self, role: str) -> list[Block]:
        """The content of the last message if it has `role`, else of a new one."""
        if not self.messages or self.messages[-1]["role"] != role:
            self.messages.append({"role": role, "content": []})
        content: list[Block] = self.messages[-1]["content"]
        return content

    def _check_answered(self) -> None:
        if self.open_calls:
            missing = ", ".join(self.open_calls)
            raise ValueError(f"{self.call_name} {missing} has no {self.result_name}")

    def assistant(self, blocks: list[Block]) -> None:
        if not blocks:
            return
        if self.messages and self.messages[-1]["role"] == "user":
            self._check_answered()
        self._last("assistant").extend(blocks)
        self.open_calls.extend(self.call_ids(blocks))

    def user(self, text: str) -> None:
        if not text:
            return
        self._check_answered()
        self._last("user").append(self.text_block(text))

    def tool_result(self, message: Message) -> None:
        call_id = message.tool_call_id or ""
        if call_id not in self.open_calls:
            raise ValueError(
                f"tool result {call_id!r} does not answer a {self.call_name} of the assistant "
                "message before it"
            )
        self.open_calls.remove(call_id)
        block = self.result_block(
            call_id, message.content, message.content.startswith(ERROR_PREFIX)
        )
        content = self._last("user")
        # Results come first: after any results already there, before anything else.
        position = 0
        while position < len(content) and self.is_result(content[position]):
            position += 1
        content.insert(position, block)

    def finish(self) -> list[Block]:
        self._check_answered()
        return self.messages

    def build(
        self, history: Sequence[Message], blocks: Callable[[Message], list[Block]]
    ) -> list[Block]:
        """The message list of `history`, an assistant message sent as `blocks(message)`."""
        route_history(
            history,
            user=self.user,
            tool_result=self.tool_result,
            assistant=lambda message: self.assistant(blocks(message)),
        )
        return self.finish()
