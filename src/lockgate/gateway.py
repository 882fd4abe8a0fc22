"""The gateway seam: what a provider gives the gating engine (`lockgate.proxy`) so that the
gate can stand on the wire, between any client and that provider.

The engine is provider-neutral: it frames the native stream (`sse.SSEFramer`), judges it
with the provider's own decoder and the gate, forwards or holds each judged event (in its
canonical form, `sse.canonical_frame`), and ends a refused stream with one error. A
`Gateway` supplies the rest, for one protocol: the tools a native request exposes, whether a
request asks for a stream, which raw events begin an action or state the finish (so that the
engine holds from there on), which events the decoder skips unread (never forwarded), which
events are keep-alives, and the bytes of a keep-alive and of the protocol's stream error (the
one its official SDK raises on); for a whole (non-streaming) response, the stream it is the
snapshot of and the protocol's error body. Each provider implements it in
`providers/<name>/gateway.py`.

`declared_tool` builds the `ToolSpec` of a tool as a request declares it (any name, any
schema: the provider's API has the last word on both), for every gateway alike;
`suffix_target` is the routing rule of a protocol whose requests are a `POST` to a path that
ends so, whatever prefix comes before, and that asks for a stream in its body;
`event_object` is an event's data as the JSON object a gateway reads its fields from.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .codec import StreamDecoder
from .conversation import ToolSpec
from .events import CALL_CUSTOM, CALL_FUNCTION
from .grammar import InputFormat, input_format
from .jsonlimits import parse_event
from .schemas import unresolvable_reference, validator_class
from .sse import ServerSentEvent

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = [
    "HOP_BY_HOP",
    "DeclaredTool",
    "Gateway",
    "ProtocolTarget",
    "Refusal",
    "body_model",
    "declared_tool",
    "declared_tools",
    "event_object",
    "schema_problem",
    "sse_frame",
    "suffix_target",
]

# Hop-by-hop headers (RFC 9110 §7.6.1): never passed on by the proxy, either way.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


@dataclass(frozen=True, slots=True)
class ProtocolTarget:
    """A request a gateway takes, as its method and path say: `stream` True or False when
    the path decides it (Gemini's `:streamGenerateContent`, Vertex AI's `:streamRawPredict`),
    None when the body's `stream` does; `problem`, why the request, though the protocol's,
    cannot be gated (it is refused with 400 before anything is sent), or None; `framing`,
    the wire a streamed answer comes in (SSE unless the target says otherwise); `gateway`,
    the gateway that judges it when not the one whose target it is (Bedrock's invoke paths:
    Anthropic Messages in Bedrock's wire, `providers/bedrock/invoke.py`), else None."""

    stream: bool | None = None
    problem: str | None = None
    framing: str = "sse"  # the wire its streamed answer comes in (`proxy.framing.FRAMINGS`)
    gateway: Gateway | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the engine refused a stream, as the client will read it. `kind`: a failure kind
    (`errors.FailureKind` values), `model_refused`, or `internal_error`; `message`: the
    whole sentence (it says what lockgate withheld and why); `transient`: a new request
    may succeed; `withheld`: the tool calls that streamed and were not released."""

    kind: str
    message: str
    transient: bool
    withheld: int

    def __post_init__(self) -> None:
        # A lone surrogate (from a name in the client's request) is written as "?": its JSON
        # escape is what readers read differently, and lockgate's own decoder refuses it.
        message = self.message.encode("utf-8", "replace").decode("utf-8")
        object.__setattr__(self, "message", message)


class Gateway(Protocol):
    """One protocol's side of the gating engine."""

    @property
    def path_endings(self) -> tuple[str, ...]:
        """How the paths of this protocol's requests end (`/chat/completions`,
        `:streamGenerateContent` …): a path that ends so in other letter case is refused, as
        an upstream may route it differently from the proxy."""
        ...

    def target(self, method: str, path: str, query: Mapping[str, str]) -> ProtocolTarget | None:
        """Whether this protocol's gate takes a request, from its method, its plain path
        (without the query) and its query (the first value of each name); None: it is no
        request of this protocol."""
        ...

    def wants_stream(self, request: Mapping[str, Any], target: ProtocolTarget) -> bool:
        """Whether a native request asks for a streamed response (its path, else its
        body)."""
        ...

    def request_problem(self, request: Mapping[str, Any]) -> tuple[str, str | None] | None:
        """Why the gate cannot judge the answer to this request (refused with 400 before it
        is sent), and the request field at fault; None: it can (Chat's `n` > 1 asks for
        several choices, of which the gate judges one)."""
        ...

    def with_model(
        self, path: str, request: Mapping[str, Any], model: str
    ) -> tuple[str, dict[str, Any]]:
        """The path and body of the same request to another model (a fall-back upstream
        that names one): the body's `model`, or the path's for a protocol that names the
        model there."""
        ...

    def request_model(self, path: str, request: Mapping[str, Any]) -> str | None:
        """The model a request names (its body's `model`, or the path's for a protocol that
        names the model there; None: none)."""
        ...

    @property
    def key_header(self) -> str:
        """The header this protocol's requests carry their key in: `authorization` (as
        `Bearer KEY`), `x-api-key`, `x-goog-api-key` …"""
        ...

    @property
    def keyed_paths(self) -> re.Pattern[str]:
        """The paths of this protocol's API whose `POST` needs the key (searched in a plain
        path without its query): its model requests as the API spells them, and its side
        requests (counting or compacting a model request's tokens). A proxy holding a key
        sends it with these (and with model listings), not with whatever path merely ends
        like them (`…/threads/{id}/messages` is OpenAI's, not Anthropic's Messages)."""
        ...

    def ungateable(self, method: str, path: str, query: Mapping[str, Sequence[str]]) -> str | None:
        """Why a request of this protocol that is no protocol request cannot pass (its
        answer may carry calls the proxy cannot judge), or None: a proxy refuses it with
        400 and this reason. `query`: every value of each of its names."""
        ...

    def claims(self, path: str, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
        """Whether a request that is no protocol request (`GET …/models`, a token count) is
        this protocol's, by what its SDK sends (a header of its own, its key's place): the
        proxy then sends a held key and its own errors in this protocol's form."""
        ...

    def client_error_body(self, status: int, message: str, param: str | None = None) -> bytes:
        """The protocol's JSON error body for an error of the proxy's own (401, 403, 413,
        503 …), in the shape its SDK reads the message of."""
        ...

    def tools(
        self, request: Mapping[str, Any], *, validate_schemas: bool = False
    ) -> tuple[ToolSpec, ...]:
        """The function tools a native request exposes (what a call may name). Without
        `validate_schemas` a call is checked only for its tool's name and for arguments that
        are a JSON object; with it, also against the tool's own schema (where the schema is
        a usable JSON Schema)."""
        ...

    def new_decoder(self) -> StreamDecoder:
        """The provider's decoder, for one response stream."""
        ...

    def begins_hold(self, event: ServerSentEvent) -> bool:
        """Whether the engine holds the stream from this event (one the decoder accepted)
        on, beyond what the normalized events show: an action (a provider-executed tool, an
        output item that asks the client for an action, a call in a form the decoder does
        not read) or the protocol's finish (a client must not see a response finish that
        lockgate then refuses). Holding early only delays; holding late lets a client see
        what lockgate may refuse, so what the gateway does not know holds. Called for every
        event until the hold: it must be cheap for the common ones."""
        ...

    def unreadable_action(self, event: ServerSentEvent) -> str | None:
        """Why an event (one the decoder accepted) carries an action the decoder does not
        read, so that the response must be refused (None: it does not). Called for every
        event: it must be cheap for the common ones."""
        ...

    def is_finish(self, event: ServerSentEvent) -> bool:
        """Whether an event (one the decoder accepted) states the protocol's finish, beyond
        the terminal the decoder reports (Chat's `finish_reason`, Anthropic's
        `message_delta`): with `hold=terminal` the engine holds from there on only."""
        ...

    def whole_stream(self, response: Mapping[str, Any]) -> bytes:
        """The SSE stream whose snapshot a whole (non-streaming) JSON response is, so that
        it is judged by the same decoder and gate as a stream. What is not a response of the
        protocol gives a stream the decoder refuses (or raises `ResponseFailure`)."""
        ...

    def error_body(self, refusal: Refusal) -> bytes:
        """The protocol's JSON error body for a refused whole response (sent with 502): the
        one its official SDK reads the message of."""
        ...

    def skipped(self, event: ServerSentEvent) -> bool:
        """Whether the decoder skips this event unread (Anthropic's frames without an
        `event:` line, a Responses `[DONE]`): the engine never forwards it, so that no
        client reads what the gate did not judge."""
        ...

    def is_keepalive(self, event: ServerSentEvent) -> bool:
        """Whether an event is a keep-alive (Anthropic's `ping`): it is forwarded at once,
        even while the engine holds the stream (comment-only frames always are)."""
        ...

    def keepalive(self) -> bytes:
        """The bytes of one keep-alive, sent while the engine holds the stream."""
        ...

    def refusal_frame(self, refusal: Refusal, last: ServerSentEvent | None) -> bytes:
        """The protocol's stream error for `refusal`, one complete SSE frame the official
        SDK raises on. `last`: the last event forwarded (None: none was), for a protocol
        that numbers its events."""
        ...

    def refusal_events(
        self, refusal: Refusal, last: ServerSentEvent | None
    ) -> list[ServerSentEvent]:
        """The protocol's stream error for `refusal` as events, for a framing to write
        (`refusal_frame` is their SSE bytes)."""
        ...

    def keepalive_event(self) -> ServerSentEvent | None:
        """The protocol's keep-alive as an event (Anthropic's `ping`), or None: a framing's
        own (an SSE comment; `keepalive` is the SSE bytes)."""
        ...


def sse_frame(event: ServerSentEvent) -> bytes:
    """An event the proxy writes itself, as one SSE frame: `event: NAME` (when named) and
    one `data:` line (its data is one line: the gateways write compact JSON)."""
    head = b"" if event.event is None else b"event: " + event.event.encode() + b"\n"
    return head + b"data: " + event.data + b"\n\n"


MAX_MODEL_CHARS = 200  # a model name longer than this is not said (None)


def body_model(request: Mapping[str, Any]) -> str | None:
    """A request body's `model`, when it is a name (`Gateway.request_model`)."""
    model = request.get("model")
    if type(model) is str and 0 < len(model) <= MAX_MODEL_CHARS:
        return model
    return None


@dataclass(frozen=True, slots=True)
class DeclaredTool(ToolSpec):
    """A tool as a request declares it: its name and schema are the request's own, taken
    as they are (the provider validates its requests; lockgate only judges the calls).
    `schema_problem`: why the schema (a custom tool: the input format) it declares is not
    one the gate can validate with (its calls are then checked as a JSON object only; a
    custom tool's input is then any text), or None. `grammar`: the grammar a custom tool's
    input must be a sentence of (`grammar.input_format`), or None for any text. `dialect`:
    the JSON Schema draft a usable schema is read in (`schemas.validator_class`), kept with
    the schema's check."""

    schema_problem: str | None = None
    grammar: InputFormat | None = None
    dialect: type[Validator] | None = None  # the draft a usable schema is read in

    def __post_init__(self) -> None:
        pass


_SCHEMA_PROBLEMS_KEPT = 256
_SCHEMA_KEY_CHARS = 65536  # a larger schema is checked every time (the kept ones stay small)
# Per schema: (why the gate cannot use it or None, the dialect it is read in).
_schema_problems: dict[str, tuple[str | None, type[Validator] | None]] = {}
_schema_problems_lock = threading.Lock()  # the library may judge from several threads


def schema_problem(schema: object) -> str | None:
    """Why `schema` is no JSON Schema describing an object that the gate can validate with,
    or None when it is one: valid in its dialect (`schemas.validator_class`: the draft its
    `$schema` names, else 2020-12 or the older draft its keywords belong to), every `$ref`
    resolving within it (nothing is retrieved).

    Checking a schema against the metaschema costs about 2 ms; a client sends the same
    tools with every request, so the answer is kept per schema (its canonical JSON text, up
    to `_SCHEMA_KEY_CHARS`; at most `_SCHEMA_PROBLEMS_KEPT`, the earliest kept forgotten first)."""
    return _schema_verdict(schema)[0]


def _schema_verdict(schema: object) -> tuple[str | None, type[Validator] | None]:
    """`schema_problem`'s answer and the dialect the schema is read in (None: not a JSON
    object), kept together, so that a gate built per request need not work it out again."""
    if not isinstance(schema, Mapping):
        return "the schema is not a JSON object", None
    if schema.get("type", "object") != "object":
        return "the schema does not describe an object", None
    try:
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):  # not JSON (a library caller's values)
        return _checked(schema)
    if len(key) > _SCHEMA_KEY_CHARS:
        return _checked(schema)
    with _schema_problems_lock:
        if key in _schema_problems:
            return _schema_problems[key]
    # Checked as its key reads back, so that the answer depends on the key alone (a tuple
    # is a JSON array in the key, and no array to jsonschema).
    verdict = _checked(json.loads(key))
    with _schema_problems_lock:
        if len(_schema_problems) >= _SCHEMA_PROBLEMS_KEPT:
            del _schema_problems[next(iter(_schema_problems))]
        _schema_problems[key] = verdict
    return verdict


def _checked(schema: Mapping[str, Any]) -> tuple[str | None, type[Validator] | None]:
    try:
        dialect = validator_class(schema)
    except RecursionError:
        return "the schema is nested too deeply", None
    return _check_schema(schema), dialect


def _check_schema(schema: Mapping[str, Any]) -> str | None:
    from jsonschema.exceptions import SchemaError

    try:
        validator_class(schema).check_schema(dict(schema))
        reference = unresolvable_reference(schema)
    except SchemaError as exc:
        return f"not a valid JSON Schema ({exc.message[:200]})"
    except RecursionError:
        return "the schema is nested too deeply"
    if reference is not None:
        return (
            f"its $ref {reference[:200]!r} does not resolve within the schema "
            "(nothing is retrieved)"
        )
    return None


def _permissive(schema: object) -> dict[str, Any]:
    """A schema that accepts any object, and keeps only whether the tool takes parameters
    (so that empty arguments mean `{}` exactly where the declared schema has none)."""
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if isinstance(properties, Mapping) and properties:
        return {"type": "object", "properties": {str(name): True for name in properties}}
    return {"type": "object"}


def declared_tool(
    name: object,
    description: object,
    schema: object,
    *,
    validate_schemas: bool,
    namespace: str = "",
    form: str = CALL_FUNCTION,
    input_format_declared: object = None,
) -> ToolSpec | None:
    """The `ToolSpec` of one declared tool (None when it has no name). Its schema is used
    when `validate_schemas` is asked and it is usable; otherwise a permissive one (a
    custom or built-in tool's calls carry no JSON Schema'd object: always permissive). A
    declared schema the gate cannot use is named in `DeclaredTool.schema_problem`, and that
    tool's calls are checked as a JSON object only: one unusable schema does not refuse
    every response. A custom tool's declared `format` (`input_format_declared`) is checked
    alike, with `validate_schemas`: a usable grammar is its `DeclaredTool.grammar`, an
    unusable one its `schema_problem` (its input is then any text)."""
    if not isinstance(name, str) or not name:
        return None
    text = description if isinstance(description, str) else ""
    if form == CALL_CUSTOM and validate_schemas:
        grammar, problem = input_format(input_format_declared)
        return DeclaredTool(name, text, _permissive(None), namespace, form, problem, grammar)
    if form != CALL_FUNCTION or not validate_schemas or schema is None:
        return DeclaredTool(name, text, _permissive(schema), namespace, form)
    problem, dialect = _schema_verdict(schema)
    if problem is not None:
        return DeclaredTool(name, text, _permissive(schema), namespace, form, problem)
    assert isinstance(schema, Mapping)
    return DeclaredTool(name, text, dict(schema), namespace, form, dialect=dialect)


def declared_tools(
    declared: object,
    fields: Callable[[dict[str, Any]], tuple[object, object, object] | None],
    *,
    validate_schemas: bool,
) -> tuple[ToolSpec, ...]:
    """The `ToolSpec`s of a list of declared tools (a request's `tools`, Gemini's
    `functionDeclarations`): `fields` gives a declared tool's (name, description, schema) in
    its protocol's shape, or None for one that is not a function tool of the client's (a
    provider's own tool)."""
    if not isinstance(declared, list):
        return ()
    found = (
        declared_tool(*picked, validate_schemas=validate_schemas)
        for tool in declared
        if isinstance(tool, dict)
        for picked in [fields(tool)]
        if picked is not None
    )
    return tuple(tool for tool in found if tool is not None)


def suffix_target(method: str, path: str, endings: tuple[str, ...]) -> ProtocolTarget | None:
    """The target of a protocol whose requests are a `POST` to a path ending in one of
    `endings` (whatever prefix comes before: `/v1`, a gateway's own), asking for a stream in
    the body."""
    if method.upper() != "POST":
        return None
    return _BODY_DECIDES if path.rstrip("/").endswith(endings) else None


_BODY_DECIDES = ProtocolTarget()


def event_object(event: ServerSentEvent) -> dict[str, Any] | None:
    """An event's data as a JSON object; None when it is not one (or not JSON)."""
    try:
        payload = parse_event(event.data)
    except ValueError:
        return None
    return payload if type(payload) is dict else None
