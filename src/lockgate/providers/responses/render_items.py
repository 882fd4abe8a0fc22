"""The output items of a Responses stream, each as the live API streams it: a message (text
or refusal) through its content part and deltas; a function or custom tool call through its
argument (input) fragments; a client-executed `shell_call` through its commands; a reasoning
item through its summary deltas; a provider-executed web search through its progress events;
and any other item (a `compaction`) added and done at once.

`OutputItemEvents` owns the event log (each event's `sequence_number`) and the output the
stream has finished so far; `render.ResponseBuilder` adds the response around them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Self

from ...scripted.reply import argument_pieces, argument_text, split

# A call item whose text streams in fragments, by its type: the item's field for the text,
# and the prefix of its `.delta` / `.done` events.
STREAMED_CALLS = {
    "function_call": ("arguments", "response.function_call_arguments"),
    "custom_tool_call": ("input", "response.custom_tool_call_input"),
}


class OutputItemEvents:
    """The event log of a Responses stream and the output items it streams."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.output: list[dict[str, Any]] = []

    def _emit(self, event: dict[str, Any]) -> Self:
        event["sequence_number"] = len(self.events)
        self.events.append(event)
        return self

    def _message(
        self, item_id: str, kind: Literal["output_text", "refusal"], text: str, pieces: int
    ) -> Self:
        index = len(self.output)
        added = {
            "id": item_id,
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        self._emit({"type": "response.output_item.added", "output_index": index, "item": added})
        if kind == "output_text":
            empty: dict[str, Any] = {"type": "output_text", "text": "", "annotations": []}
            done_part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
        else:
            empty = {"type": "refusal", "refusal": ""}
            done_part = {"type": "refusal", "refusal": text}
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        self._emit({"type": "response.content_part.added", **where, "part": empty})
        delta_type = (
            "response.output_text.delta" if kind == "output_text" else "response.refusal.delta"
        )
        for piece in split(text, pieces):
            event: dict[str, Any] = {"type": delta_type, **where, "delta": piece}
            if kind == "output_text":
                event["logprobs"] = []
            self._emit(event)
        if kind == "output_text":
            self._emit({"type": "response.output_text.done", **where, "text": text, "logprobs": []})
        else:
            self._emit({"type": "response.refusal.done", **where, "refusal": text})
        self._emit({"type": "response.content_part.done", **where, "part": done_part})
        item = {
            "id": item_id,
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [done_part],
        }
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )

    def text(self, item_id: str, text: str, pieces: int = 4) -> Self:
        return self._message(item_id, "output_text", text, pieces)

    def refusal(self, item_id: str, text: str) -> Self:
        return self._message(item_id, "refusal", text, 2)

    def call(
        self,
        item_id: str,
        call_id: str,
        name: str,
        arguments: str | Mapping[str, Any],
        pieces: int = 5,
        *,
        finish: bool = True,
        status: str = "completed",
        namespace: str | None = None,
    ) -> Self:
        """A function call item (in a tool `namespace`, if given); with `finish=False` the
        stream stops mid-arguments."""
        text = argument_text(arguments)
        return self.streamed_call(
            "function_call", item_id, call_id, name, text, pieces, finish, status, namespace
        )

    def custom_call(
        self,
        item_id: str,
        call_id: str,
        name: str,
        text: str,
        pieces: int = 4,
        *,
        finish: bool = True,
        namespace: str | None = None,
    ) -> Self:
        """A custom (free-form) tool call item: its input streamed in pieces, then done; with
        `finish=False` the stream stops mid-input."""
        return self.streamed_call(
            "custom_tool_call", item_id, call_id, name, text, pieces, finish, "completed", namespace
        )

    def streamed_call(
        self,
        kind: str,
        item_id: str,
        call_id: str,
        name: str,
        text: str,
        pieces: int,
        finish: bool,
        status: str,
        namespace: str | None,
    ) -> Self:
        """A call item whose text (`STREAMED_CALLS`) streams in pieces: added, its
        fragments, then (unless cut) its text's `.done` and the item's."""
        field, events = STREAMED_CALLS[kind]
        index = len(self.output)
        base = {"id": item_id, "type": kind, "call_id": call_id, "name": name}
        if namespace is not None:
            base["namespace"] = namespace
        added = {**base, "status": "in_progress", field: ""}
        self._emit({"type": "response.output_item.added", "output_index": index, "item": added})
        where = {"item_id": item_id, "output_index": index}
        for piece in argument_pieces(text, pieces, cut=not finish):
            self._emit({"type": f"{events}.delta", **where, "delta": piece})
        if not finish:
            return self
        named = {"name": name} if kind == "function_call" else {}  # a custom call's is not
        self._emit({"type": f"{events}.done", **where, **named, field: text})
        item = {**base, "status": status, field: text}
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )

    def shell_call(self, item_id: str, call_id: str, commands: list[str]) -> Self:
        """A client-executed built-in shell call (`shell_call`): added in progress, its
        commands as progress events, then done whole."""
        index = len(self.output)
        base = {"id": item_id, "type": "shell_call", "call_id": call_id}
        action = {"commands": commands, "timeout_ms": None, "max_output_length": None}
        added = {**base, "status": "in_progress", "action": {**action, "commands": []}}
        self._emit({"type": "response.output_item.added", "output_index": index, "item": added})
        for number, command in enumerate(commands):
            self._emit(
                {
                    "type": "response.shell_call_command.added",
                    "output_index": index,
                    "command_index": number,
                    "command": command,
                }
            )
        item = {**base, "status": "completed", "action": action}
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )

    def reasoning(self, item: dict[str, Any], pieces: int = 3) -> Self:
        """A reasoning item: added (empty), its summary as deltas, then done (whole item)."""
        index = len(self.output)
        added = {"id": item["id"], "type": "reasoning", "summary": []}
        self._emit({"type": "response.output_item.added", "output_index": index, "item": added})
        for part_index, part in enumerate(item.get("summary", [])):
            for piece in split(str(part.get("text", "")), pieces):
                self._emit(
                    {
                        "type": "response.reasoning_summary_text.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "summary_index": part_index,
                        "delta": piece,
                    }
                )
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )

    def output_item(self, item: dict[str, Any]) -> Self:
        """An output item of any other type, added and done at once."""
        index = len(self.output)
        self._emit({"type": "response.output_item.added", "output_index": index, "item": item})
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )

    def compaction(self, item_id: str, opaque: str) -> Self:
        """A `compaction` item (the provider's compaction of the conversation so far, its
        `encrypted_content` opaque), added and done whole."""
        return self.output_item({"id": item_id, "type": "compaction", "encrypted_content": opaque})

    def web_search(self, item_id: str, query: str) -> Self:
        """A provider-executed web search, with its progress events and complete item."""
        index = len(self.output)
        item = {
            "id": item_id,
            "type": "web_search_call",
            "status": "completed",
            "action": {"type": "search", "query": query},
        }
        added = {**item, "status": "in_progress"}
        self._emit({"type": "response.output_item.added", "output_index": index, "item": added})
        for stage in ("in_progress", "searching", "completed"):
            self._emit(
                {
                    "type": f"response.web_search_call.{stage}",
                    "item_id": item_id,
                    "output_index": index,
                }
            )
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )


def reasoning_item(item_id: str, text: str, opaque: str = "") -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text}],
        "encrypted_content": opaque or f"gAAAAB-opaque-{item_id}-do-not-touch==",
    }
