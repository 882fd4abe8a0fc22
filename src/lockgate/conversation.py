"""Portable, provider-neutral conversation values.

These types are what the agent loop, the tools and the history speak. Provider encoders
translate them to a native wire format; nothing here knows about any one provider.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})
StopReason = Literal["model_finished", "model_refused", "turn_limit"]

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
    """Token usage of one response, or a sum of several, in the same terms for every provider.

    - `input_tokens`: every input token of the request, cached ones included (where a
      provider counts cached input apart, its decoder adds it back).
    - `cached_input_tokens`: the part of the input read from the provider's prompt cache.
    - `cache_write_tokens`: the part of the input written to the cache, where reported;
      kept apart from cache reads because providers bill them differently.
    - `output_tokens`: every generated token, reasoning included.
    - `reasoning_tokens`: the part of the output spent on reasoning, where reported.
    - `total_tokens`: the provider's own total, or input + output where it states none.

    Each provider's decoder documents its mapping of native usage fields to these.
    """

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.output_tokens + other.output_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.total_tokens + other.total_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    def line(self) -> str:
        """`usage: input=N (cached=N) output=N (reasoning=N) total=N`, with
        `(cached=N, cache_write=N)` when cache writes were reported."""
        cache = f"cached={self.cached_input_tokens}"
        if self.cache_write_tokens:
            cache += f", cache_write={self.cache_write_tokens}"
        return (
            f"usage: input={self.input_tokens} ({cache}) "
            f"output={self.output_tokens} (reasoning={self.reasoning_tokens}) "
            f"total={self.total_tokens}"
        )


# --- a response's output, in its original order ------------------------------------------

NativeKind = Literal["reasoning", "provider_output"]


@dataclass(frozen=True, slots=True)
class NativeItem:
    """A provider-native output item, opaque to lockgate and replayed unchanged, in place,
    only to the producer that made it.

    `reasoning`: a protocol's reasoning output (items, blocks or fields) that the server
    wants back. `provider_output`: what the provider executed itself (built-in / server
    tools and their results). Neither is ever a request for a local action.
    """

    kind: NativeKind
    item: JSONObject


@dataclass(frozen=True, slots=True)
class TextPart:
    """Answer text. `item_id`: the provider's id of the item that held it, where it has one
    (a replay to the same producer names it again)."""

    text: str
    item_id: str = ""


@dataclass(frozen=True, slots=True)
class RefusalPart:
    text: str
    item_id: str = ""


@dataclass(frozen=True, slots=True)
class CallPart:
    """The position of the call with this id among the response's output (`item_id`: the
    provider's own id of the call item, where it has one besides the call id)."""

    call_id: str
    item_id: str = ""


OutputPart = TextPart | RefusalPart | CallPart | NativeItem


@dataclass(frozen=True, slots=True)
class Message:
    """One entry of the portable history.

    Assistant messages also record where they came from: `producer` (provider and model,
    `provider:model`), the provider's `response_id` and `usage`. `content` is the
    answer text and `refusal` a refusal, kept apart. `output` is the response's output in
    its original order (text, refusals, calls, native items), so that the same producer can
    be sent back exactly what it produced; portable messages leave it empty, and encoders
    for another producer use only `content`, `refusal` and `tool_calls`. `paused`: a
    provider's paused turn (finish reason `pause_turn`); it is sent back as it is to
    continue.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    producer: str | None = None
    response_id: str | None = None
    usage: Usage | None = None
    refusal: str = ""
    output: tuple[OutputPart, ...] = ()
    paused: bool = False

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(sorted(ROLES))}")
        if (self.tool_calls or self.output or self.refusal or self.paused) and (
            self.role != "assistant"
        ):
            raise ValueError("only assistant messages carry calls, refusals or output")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("tool messages, and only tool messages, carry a tool_call_id")
        if self.paused and self.tool_calls:
            raise ValueError("a paused response carries no calls")

    def native_for(self, producer: str) -> tuple[OutputPart, ...]:
        """The original output, when `producer` made it (else empty: use the portable
        fields)."""
        return self.output if self.output and self.producer == producer else ()


# --- tools --------------------------------------------------------------------------------

_NO_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {},
    "required": [],
    "additionalProperties": False,
}
TOOL_NAME_MAX = 64


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the model may request: name, description and a JSON-Schema object for its
    arguments.

    Any valid JSON Schema whose top level describes an object is accepted (optional
    properties, nested objects, enums, `anyOf` …). Arguments are always validated locally
    against it; `strict` says whether it also qualifies for the providers' strict function
    mode (every object closed with `additionalProperties: false` and all its properties
    required), which is requested only then.

    `namespace` and `form` describe a tool a request declares to a provider in front of
    another client (`gateway.DeclaredTool`): the group its name belongs to ("" for none), and
    what its calls carry (`events.CALL_FUNCTION`: a JSON object; `events.CALL_CUSTOM`: free
    text; else the item type of a client-executed built-in tool, `shell_call` …). lockgate's
    own tools are plain functions.
    """

    name: str
    description: str
    parameters: JSONObject = field(default_factory=lambda: dict(_NO_PARAMETERS))
    namespace: str = ""
    form: str = "function"

    def __post_init__(self) -> None:
        if (
            not self.name
            or len(self.name) > TOOL_NAME_MAX
            or not self.name.isascii()
            or not self.name.replace("_", "").replace("-", "").isalnum()
        ):
            raise ValueError(
                f"tool name {self.name!r} must be 1-{TOOL_NAME_MAX} letters, digits, '_' or '-'"
            )
        if not isinstance(self.parameters, Mapping):
            raise ValueError(f"tool {self.name}: parameters must be a JSON-Schema object")
        from jsonschema import Draft202012Validator  # imported when the first tool is made
        from jsonschema.exceptions import SchemaError

        try:
            Draft202012Validator.check_schema(dict(self.parameters))
        except SchemaError as exc:
            raise ValueError(f"tool {self.name}: invalid parameter schema: {exc.message}") from exc
        except RecursionError:
            raise ValueError(f"tool {self.name}: parameter schema nested too deeply") from None
        if self.parameters.get("type", "object") != "object":
            raise ValueError(f"tool {self.name}: parameters must be an object schema")

    @property
    def strict(self) -> bool:
        """Whether the schema qualifies for the providers' strict function mode."""
        return _strict_object(self.parameters)

    @property
    def takes_no_arguments(self) -> bool:
        """A tool without parameters: empty or absent arguments mean `{}`."""
        return not self.parameters.get("properties")


def _strict_object(schema: object, depth: int = 0) -> bool:
    """Every object in the schema is closed and requires all its properties."""
    if depth > 32 or not isinstance(schema, Mapping):
        return False
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if not isinstance(properties, Mapping):
            return False
        if schema.get("additionalProperties") is not False:
            return False
        if sorted(schema.get("required", [])) != sorted(properties):
            return False
        if not all(_strict_object(value, depth + 1) for value in properties.values()):
            return False
    if "items" in schema and not _strict_object(schema["items"], depth + 1):
        return False
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options = schema[key]
            if not isinstance(options, list):
                return False
            if not all(_strict_object(option, depth + 1) for option in options):
                return False
    return True


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one agent run produced.

    `model_finished` means the last response requested no tool call. It does not mean the
    task succeeded: inspect the tool results and the files. `model_refused`: the last
    response was a refusal.
    """

    history: tuple[Message, ...]
    stop_reason: StopReason
    usage: Usage = field(default_factory=Usage)  # completed responses of this run
