"""A whole (non-streaming) answer through the gate: its body read under the cap and the
deadline (`read_whole`), then judged (`judge_whole`): the gateway writes the stream the
answer is the snapshot of, and the judge the stream is judged by reads it; the verdict
(`WholeVerdict`) is what the client receives. `engine` re-exports the judging names."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..conversation import ToolSpec
from ..errors import FailureKind, ResponseFailure
from ..events import Observer, ignore_event
from ..gate import ResponseGate
from ..jsonlimits import parse_event
from ..providers.base import Provider
from .judge import Accepted, GatingOptions, Outcome, StreamJudge, _gateway, _unchanged, refusal_from

__all__ = ["MAX_WHOLE_BYTES", "WholeVerdict", "judge_whole", "read_whole"]

MAX_WHOLE_BYTES = 32 * 1024 * 1024  # a non-streaming body is read under this cap


@dataclass(frozen=True, slots=True)
class WholeVerdict:
    """A non-streaming response judged: `status` and `body` are what the client receives
    (accepted: the upstream's own, unchanged; refused: 502 and the protocol's error body);
    `headers`, what a refusal adds: `x-should-retry: false` when a new request cannot help
    (the official SDKs obey it instead of retrying a 502: a second paid call for nothing)."""

    outcome: Outcome
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


def judge_whole(
    entry: Provider,
    request: Mapping[str, Any],
    body: bytes,
    options: GatingOptions | None = None,
    *,
    status: int = 200,
    observer: Observer = ignore_event,
    redact: Callable[[str], str] | None = None,
    tools: Sequence[ToolSpec] | None = None,
) -> WholeVerdict:
    """Judge a whole JSON response (the answer to a request without `stream`) by the rules
    a stream is judged by: the gateway writes the stream the response is the snapshot of
    (`Gateway.whole_stream`), and the same decoder and gate read it. Accepted: the body
    passes unchanged. Refused (not a response of the protocol, an unfinished or failed one,
    an invalid batch, a bound): a 502 with the protocol's error body, which says how many
    tool calls lockgate withheld and why."""
    gateway = _gateway(entry)
    options = options or GatingOptions()
    if tools is None:
        tools = gateway.tools(request, validate_schemas=options.validate_schemas)
    gate = ResponseGate(tools, observer, options.limits)
    judge = StreamJudge(gateway, gate, options.max_event_bytes, lambda: 0.0, math.inf)
    try:
        if len(body) > MAX_WHOLE_BYTES:
            raise ResponseFailure(
                FailureKind.BOUND_EXCEEDED,
                f"the response body is larger than {MAX_WHOLE_BYTES} bytes",
            )
        try:
            payload = parse_event(body)
        except ValueError as exc:
            raise ResponseFailure(
                FailureKind.MALFORMED_EVENT, f"the response body is not JSON ({exc})"
            ) from None
        if type(payload) is not dict:
            raise ResponseFailure(
                FailureKind.MALFORMED_EVENT, "the response body is not a JSON object"
            )
        judge.take(gateway.whole_stream(payload))
        judge.end()
    except Exception as exc:
        refused = refusal_from(exc, judge.calls, redact or _unchanged)
        advice = () if refused.refusal.transient else (("x-should-retry", "false"),)
        return WholeVerdict(refused, 502, gateway.error_body(refused.refusal), advice)
    assert judge.decision is not None
    return WholeVerdict(Accepted(judge.decision), status, body)


async def read_whole(chunks: AsyncIterator[bytes], deadline: float) -> bytes:
    """A whole answer's body, read by `deadline` (a loop time: TimeoutError) and up to just
    past `MAX_WHOLE_BYTES` (`judge_whole` then refuses it as too large); whatever reading it
    raises goes on (a body that broke off)."""
    data = bytearray()
    async with asyncio.timeout_at(deadline):
        async for chunk in chunks:
            data += chunk
            if len(data) > MAX_WHOLE_BYTES:
                break  # judged as too large
    return bytes(data)
