"""Every shape mutation by name (`SHAPES`), and those whose findings are known (`KNOWN`)."""

from __future__ import annotations

from .arguments import json_in_arguments
from .chat_anthropic import anthropic_start_input, chat_index, chat_repeated_fragment
from .events import Shape
from .gemini import gemini_parts
from .responses import _responses_added, responses_no_done, responses_output_null

SHAPES: dict[str, Shape] = {
    "json in arguments": json_in_arguments,
    "chat index": chat_index,
    "chat repeated fragment": chat_repeated_fragment,
    "anthropic start input": anthropic_start_input,
    "responses no done": responses_no_done,
    "responses output null": responses_output_null,
    "responses custom tool": _responses_added("custom met", "custom unmet"),
    "responses namespace": _responses_added("namespace", "namespace other"),
    "responses built-in item": _responses_added("builtin", "builtin undeclared"),
    "gemini parts": gemini_parts,
}

# The mutations whose findings are known, and the fix each waits for (in progress elsewhere):
# a finding of one of them is listed as known; it must disappear once the fix is merged.
KNOWN: dict[str, str] = {
    "json in arguments": "JSON strictness (jsonlimits.py): NaN, duplicate keys, lone surrogates",
    "chat index": "the Chat decoder's index rules",
    "anthropic start input": "the Anthropic decoder: a tool_use start's input",
    "responses no done": "the Responses decoder: a call without output_item.done",
    "responses custom tool": "custom tools' grammars (gate.py)",
}
