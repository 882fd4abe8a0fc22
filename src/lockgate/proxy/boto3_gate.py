"""The gate inside a boto3 process: `gated_bedrock(client)` gates a `bedrock-runtime`
client's model calls in place, so that strands, langchain-aws and pydantic-ai (which call
boto3 themselves) get the guarantee `gated_client()` gives the httpx-based SDKs.

    bedrock = gated_bedrock(boto3.client("bedrock-runtime"))

**How**: through botocore's own event system, on the client (or on a session, whose clients
made afterwards inherit it), never by replacing its methods: `before-parameter-build` reads
the request's declared tools (`toolConfig.tools[].toolSpec` for Converse, the invoke body's
`tools`); `after-call` replaces the response's `EventStream` with one over the same raw
urllib3 body read through lockgate's engine (`proxy.judge`: the sans-IO judge the proxy and
`gated_client()` use, with the event-stream framing `proxy.framing.eventstream`, the Bedrock
gateways `gateway.GATEWAY` / `gateway.INVOKE`, their decoders and `gate.ResponseGate`).
botocore's own parser then reads only what the gate released. The events are botocore's
documented extension point; they stay on one client or session, work for every framework
that takes a client (or a session) or exposes the one it made, and leave every other
operation of the client untouched.

Why not botocore's reader: its `EventStreamBuffer` has no end-of-stream check, so a body
cut inside its last message ends the iteration cleanly, as if the model had finished. The
judge reads the raw bytes with lockgate's codec (both CRCs, bounds, a cut is
`stream_ended`).

**Semantics** (the proxy's): text, reasoning and the message start reach the caller as they
are judged; from the first tool call (or the stop reason) on, every event is held until the
body ends with the terminal (ConverseStream's `messageStop` with `tool_use` or `end_turn`,
then `metadata`; Anthropic's `message_stop` on invoke) and the whole batch validates against
the declared tools; then released in order. Any refusal (a cut or corrupt message, an
exception message, no `messageStop`, `max_tokens`, `malformed_tool_use`, an unknown tool,
arguments against the schema, a bound, the deadline, a broken connection, silence longer
than the client's `read_timeout`) raises `BedrockGateError` from the iteration: botocore's
`EventStreamError` (a `ClientError`), with the code botocore gives the proxy's refusal
message (`serviceUnavailableException` when a new request may succeed, else
`modelStreamErrorException`). No event of the withheld batch reached the caller.

**Whole answers** (`converse`, `invoke_model`): judged by the same rules before the caller
sees them (`proxy.whole.judge_whole`); refused, `BedrockGateError` is raised by the call.
An `invoke_model*` body without `anthropic_version` (another model family) is refused before
it is sent, as the proxy refuses it: lockgate gates InvokeModel for Anthropic models only.
"""

from __future__ import annotations

import dataclasses
import io
import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.eventstream import EventStream  # type: ignore[import-untyped]
from botocore.exceptions import EventStreamError  # type: ignore[import-untyped]
from botocore.response import StreamingBody  # type: ignore[import-untyped]

from ..conversation import ToolSpec
from ..errors import FailureKind, ResponseFailure
from ..events import Event, Observer, ignore_event
from ..gate import ResponseGate
from ..gateway import Gateway, Refusal
from ..http import describe
from ..providers.bedrock import PROVIDER
from ..providers.bedrock.framing import EXCEPTION_PREFIX
from ..providers.bedrock.gateway import GATEWAY, INVOKE
from .framing import framing_for
from .judge import GatingOptions, Refused, StreamJudge, refusal_from
from .whole import MAX_WHOLE_BYTES, judge_whole

__all__ = ["SERVICE", "BedrockGateError", "gated_bedrock"]

SERVICE = "bedrock-runtime"
# The operations gated, by botocore's name: the gateway that judges each, streamed or not.
_OPERATIONS: dict[str, tuple[Gateway, bool]] = {
    "ConverseStream": (GATEWAY, True),
    "InvokeModelWithResponseStream": (INVOKE, True),
    "Converse": (GATEWAY, False),
    "InvokeModel": (INVOKE, False),
}
_CONTEXT_KEY = "lockgate_plan"  # the request's plan, in botocore's per-call context
_UNIQUE = "lockgate-bedrock-gate"


class BedrockGateError(EventStreamError):  # type: ignore[misc]
    """lockgate refused a Bedrock response (or an invoke request it cannot gate): a
    `botocore.exceptions.EventStreamError`, so a `ClientError` too, as botocore raises on a
    stream's exception message. `kind` is the refusal's (`stream_ended`, `invalid_batch`,
    `response_incomplete` …), `withheld` how many tool calls were not released,
    `transient` whether a new request may succeed."""

    def __init__(self, refusal: Refusal, operation_name: str, code: str) -> None:
        super().__init__({"Error": {"Code": code, "Message": refusal.message}}, operation_name)
        self.refusal = refusal
        self.kind = refusal.kind
        self.withheld = refusal.withheld
        self.transient = refusal.transient


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one call is judged by: its gateway, the tools its request declared, its start
    (a `time.monotonic()`), the options and the observer."""

    gateway: Gateway
    request: Mapping[str, Any]
    tools: tuple[ToolSpec, ...]
    started_at: float
    options: GatingOptions
    observer: Observer


def gated_bedrock(
    target: Any,
    options: GatingOptions | None = None,
    *,
    observer: Callable[[Event], None] | None = None,
) -> Any:
    """Gate `target`'s Bedrock model calls (see the module docstring) and return it:
    a boto3 `bedrock-runtime` client, a `boto3.Session` or a botocore session (every
    `bedrock-runtime` client made from it afterwards is gated). Gating twice is gating once.
    `options`: how responses are judged (`GatingOptions`: bounds, the deadline, schema
    validation, what is held); `observer` sees the normalized events of every response."""
    register = _register_of(target)
    gating = options or GatingOptions()
    seen: Observer = observer or ignore_event
    for operation in _OPERATIONS:
        register(
            f"before-parameter-build.{SERVICE}.{operation}",
            _Planner(operation, gating, seen),
            unique_id=f"{_UNIQUE}-plan-{operation}",
        )
        register(
            f"after-call.{SERVICE}.{operation}",
            _judge_answer,
            unique_id=f"{_UNIQUE}-judge-{operation}",
        )
    return target


def _register_of(target: Any) -> Callable[..., None]:
    meta = getattr(target, "meta", None)
    events = getattr(meta, "events", None)  # a client
    if events is not None:
        service = getattr(getattr(meta, "service_model", None), "service_name", None)
        if service != SERVICE:
            raise ValueError(f"gated_bedrock takes a {SERVICE!r} client, not {service!r}")
        return events.register  # type: ignore[no-any-return]
    events = getattr(target, "events", None)  # a boto3.Session
    if events is not None and callable(getattr(events, "register", None)):
        return events.register  # type: ignore[no-any-return]
    if callable(getattr(target, "register", None)):  # a botocore session
        return target.register  # type: ignore[no-any-return]
    raise TypeError("gated_bedrock takes a bedrock-runtime client or a boto3/botocore session")


class _Planner:
    """`before-parameter-build`: the call's plan, kept in its context."""

    __slots__ = ("_observer", "_operation", "_options")

    def __init__(self, operation: str, options: GatingOptions, observer: Observer) -> None:
        self._operation = operation
        self._options = options
        self._observer = observer

    def __call__(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        gateway, _streamed = _OPERATIONS[self._operation]
        request: Mapping[str, Any] = params
        if gateway is INVOKE:
            request = _invoke_body(params)
            problem = gateway.request_problem(request)
            if problem is not None:
                refusal = Refusal("unsupported_request", problem[0], False, 0)
                raise BedrockGateError(refusal, self._operation, "ValidationException")
        tools = gateway.tools(request, validate_schemas=self._options.validate_schemas)
        context[_CONTEXT_KEY] = _Plan(
            gateway, request, tools, time.monotonic(), self._options, self._observer
        )


def _invoke_body(params: dict[str, Any]) -> dict[str, Any]:
    """An invoke request's body as a JSON object ({}: it is none). A file-like body is read
    and put back as bytes, so that botocore still sends it."""
    body: object = params.get("body")
    reader = getattr(body, "read", None)
    if callable(reader):
        body = reader()
        params["body"] = body
    try:
        value = json.loads(body) if isinstance(body, str | bytes | bytearray) else None
    except (ValueError, RecursionError):
        value = None
    return value if isinstance(value, dict) else {}


def _judge_answer(
    http_response: Any, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
) -> None:
    """`after-call`: a 2xx answer's stream replaced by the gated one, or its whole body
    judged; an error status passes (botocore raises its `ClientError`)."""
    plan = context.get(_CONTEXT_KEY)
    if not isinstance(plan, _Plan) or not 200 <= http_response.status_code < 300:
        return
    name = model.name
    if _OPERATIONS[name][1]:
        for key, value in parsed.items():
            if isinstance(value, EventStream):
                shape = model.output_shape.members[key]
                parser = getattr(value, "_parser", None)  # botocore's own event parser
                body = _GatedBody(http_response.raw, plan, name)
                parsed[key] = EventStream(body, shape, parser, name)
        return
    if name == "InvokeModel":
        raw = _read_capped(parsed["body"])
        _judge_whole(plan, raw, name)
        parsed["body"] = StreamingBody(io.BytesIO(raw), len(raw))
    elif http_response.raw is None:  # botocore's Stubber: no wire, the stubbed answer
        answer = {key: value for key, value in parsed.items() if key != "ResponseMetadata"}
        _judge_whole(plan, json.dumps(answer, default=str).encode(), name)
    else:
        _judge_whole(plan, http_response.content, name)


def _read_capped(body: Any) -> bytes:
    """A streaming body read up to just past `MAX_WHOLE_BYTES` (the judge refuses more)."""
    try:
        return bytes(body.read(MAX_WHOLE_BYTES + 1))
    finally:
        body.close()


def _judge_whole(plan: _Plan, body: bytes, operation: str) -> None:
    entry = PROVIDER if plan.gateway is GATEWAY else _invoke_entry()
    verdict = judge_whole(
        entry,
        plan.request,
        body,
        plan.options,
        observer=plan.observer,
        tools=plan.tools,
    )
    if isinstance(verdict.outcome, Refused):
        raise _error(plan.gateway, verdict.outcome.refusal, operation)


def _invoke_entry() -> Any:
    return dataclasses.replace(PROVIDER, gateway=lambda: INVOKE)


def _error(gateway: Gateway, refusal: Refusal, operation: str) -> BedrockGateError:
    """The error botocore would raise on the gateway's own refusal message."""
    [event] = gateway.refusal_events(refusal, None)
    code = (event.event or "").removeprefix(EXCEPTION_PREFIX)
    return BedrockGateError(refusal, operation, code)


class _GatedBody:
    """The raw body botocore's `EventStream` reads (`stream()`, `close()`): the upstream's
    bytes judged, only what the gate released passed on; a refusal raises."""

    __slots__ = ("_closed", "_operation", "_plan", "_raw")

    def __init__(self, raw: Any, plan: _Plan, operation: str) -> None:
        self._raw = raw
        self._plan = plan
        self._operation = operation
        self._closed = False

    def close(self) -> None:
        self._closed = True
        self._raw.close()

    def stream(self) -> Iterator[bytes]:
        plan = self._plan
        options = plan.options
        gateway = plan.gateway
        judge = StreamJudge(
            gateway,
            ResponseGate(plan.tools, plan.observer, options.limits),
            options.max_event_bytes,
            time.monotonic,
            plan.started_at + options.deadline,
            options.hold,
            options.max_held_bytes,
            framing=framing_for("eventstream", gateway, options.max_event_bytes),
        )
        try:
            pieces = iter(self._raw.stream())
            while True:
                try:
                    chunk = _next_piece(pieces)
                    if chunk is None:
                        last = judge.end()
                        self._raw.close()  # closed before the release, as the client does
                        break
                    judge.take(chunk)
                except Exception as exc:
                    self._raw.close()
                    refused = refusal_from(exc, judge.calls, _unchanged)
                    raise _error(gateway, refused.refusal, self._operation) from None
                out = judge.drain()
                if out:
                    yield out
            if last:
                yield last
            yield from judge.released()
        finally:
            judge.give_back()


def _next_piece(pieces: Iterator[bytes]) -> bytes | None:
    """The next piece of the raw body (None: it ended cleanly); a reading failure as the
    judge words it: silence past the client's `read_timeout`, or a break."""
    try:
        return next(pieces, None)
    except Exception as exc:
        if _timed_out(exc):
            raise ResponseFailure(
                FailureKind.IDLE_TIMEOUT,
                f"no bytes within the client's read_timeout ({describe(exc)}); nothing executed",
            ) from None
        raise ResponseFailure(FailureKind.TRANSPORT, f"stream broke: {describe(exc)}") from None


def _timed_out(exc: BaseException) -> bool:
    """Whether a reading failure is a read timeout (urllib3's, or the socket's under it)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, TimeoutError) or type(seen).__name__ == "ReadTimeoutError":
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _unchanged(text: str) -> str:
    return text
