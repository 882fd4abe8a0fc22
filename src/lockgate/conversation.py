"""Portable, provider-neutral conversation values.

These types are what the agent loop, the tools and the history speak. Provider encoders
translate them to a native wire format; nothing here knows about any one provider.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

Role = Literal["system", "user", "assistant", "tool"]
StopReason = Literal["model_finished", "turn_limit"]

JSONObject = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One validated tool call requested by a complete response.

    `arguments` is the parsed JSON object; `arguments_json` keeps the exact argument text the
    model produced so that replaying history sends back the same bytes.
    """

    id: str
    name: str
    arguments: JSONObject
    arguments_json: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("a tool call needs a non-empty id")
        if not self.name:
            raise ValueError("a tool call needs a tool name")


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one response, or a sum of several."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.output_tokens + other.output_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.total_tokens + other.total_tokens,
        )

    def line(self) -> str:
        """`usage: input=N (cached=N) output=N (reasoning=N) total=N`"""
        return (
            f"usage: input={self.input_tokens} (cached={self.cached_input_tokens}) "
            f"output={self.output_tokens} (reasoning={self.reasoning_tokens}) "
            f"total={self.total_tokens}"
        )


@dataclass(frozen=True, slots=True)
class ReasoningItem:
    """A provider-native reasoning item, kept unchanged for replay immediately before the
    call it preceded (`before_call`), and only to the producer that made it."""

    before_call: str
    item: JSONObject


@dataclass(frozen=True, slots=True)
class Message:
    """One entry of the portable history.

    Assistant messages also record where they came from: `producer` (provider and model,
    e.g. `openai-responses:gpt-5`), the provider's `response_id`, `usage`, and native
    `reasoning` items that may be replayed only to the same producer.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    producer: str | None = None
    response_id: str | None = None
    usage: Usage | None = None
    reasoning: tuple[ReasoningItem, ...] = ()

    def __post_init__(self) -> None:
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool calls")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("tool messages, and only tool messages, carry a tool_call_id")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the model may request: name, description and a strict JSON-schema object.

    Strict means what the providers' strict function mode needs: an object schema whose
    properties are all required and which allows no additional properties.
    """

    name: str
    description: str
    parameters: JSONObject = field(
        default_factory=lambda: {
            "type": "object",
            "properties": {},
            "required": [],
            "additionalProperties": False,
        }
    )

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"tool name {self.name!r} must be letters, digits, '_' or '-'")
        try:
            Draft202012Validator.check_schema(dict(self.parameters))
        except SchemaError as exc:
            raise ValueError(f"tool {self.name}: invalid parameter schema: {exc.message}") from exc
        if self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name}: parameters must be an object schema")
        if self.parameters.get("additionalProperties") is not False:
            raise ValueError(f"tool {self.name}: parameters must set additionalProperties: false")
        properties = self.parameters.get("properties", {})
        if sorted(self.parameters.get("required", [])) != sorted(properties):
            raise ValueError(f"tool {self.name}: every property must be required")


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one agent run produced.

    `model_finished` means the last response requested no tool call. It does not mean the
    task succeeded: inspect the tool results and the files.
    """

    history: tuple[Message, ...]
    stop_reason: StopReason
    usage: Usage = field(default_factory=Usage)  # completed responses of this run
