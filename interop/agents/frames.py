"""What each agent does with a refusal frame: the frame `lockgate proxy` ends a refused
stream with today, and the alternatives, tried on the real agents.

    python -m interop.agents.frames [--agents …] [--frames name,…] [--timeout 60] [--jobs 2]
                                    [--pause 0.5] [--cache DIR] [--out DIR] [--no-install]

The server answers the agent's first request as the proxy does when it refuses a response:
the events it forwarded before it began to hold (Responses `response.created` and
`response.in_progress`, Anthropic `message_start`, Chat the first chunk with the role;
Gemini nothing), a pause (`--pause`, 0.5 s: the proxy refuses only after it held the call),
then ONE refusal frame whose message is a lockgate reason (`REASON`), then the body ends;
the held calls never reach the agent. Every first request gets it again, so the number of
requests shows the agent's retries; a first request for a whole answer (Claude Code's
fallback after three failed streams) gets what the proxy answers a refused whole response
with: 502 and the protocol's error body with the same reason. Per agent and frame the table
says whether the agent ran anything, how many requests it made, whether it showed lockgate's
reason, its exit and its last line.

The frames (`today` is what `refusal_frame` in `providers/<name>/gateway.py` sends now):

- Responses: `error-nested` (`event: error`, the error nested under `error`: what the
  Python SDK raises on), `error-flat` (`event: error` with `code`/`message` at the top, as
  OpenAI documents the event), `response-failed` (`response.failed`, the response's
  `error` holding the reason), `error-then-failed` (the flat error, then
  `response.failed`), `error-nested-then-failed` (today: the nested error, then
  `response.failed`), `end` (no frame: the body just ends).
- Chat: `error-chunk` (today: `data: {"error": …}`, no `[DONE]`), `error-chunk-done` (the
  same, then `[DONE]`), `error-event` (`event: error` with the same data), `end`.
- Anthropic: `error-overloaded` (today's transient refusal: `event: error`,
  `overloaded_error`), `error-api` (today's other refusals: `api_error`), `end`.
- Gemini (today: `error-503` for a transient refusal, `error-400` with
  `FAILED_PRECONDITION` for the others): `error-503` (`data: {"error": {"code": 503, "status":
  "UNAVAILABLE"}}`), `error-500` (`INTERNAL`), `error-400` (`INVALID_ARGUMENT`),
  `finish-other` and `malformed-call` (a candidate with `finishReason` `OTHER` /
  `MALFORMED_FUNCTION_CALL` and the reason as its `finishMessage`), `blocked`
  (`promptFeedback.blockReason: OTHER` with the reason as `blockReasonMessage`), `end`.
- Bedrock invoke (`bedrock`: Anthropic events in `chunk` messages) and ConverseStream
  (`converse`): `exception-model-stream` (today's refusal: an `exception` message,
  `modelStreamErrorException`), `exception-unavailable` (today's transient refusal:
  `serviceUnavailableException`), `end`.
- Every protocol: `http-502`, no stream at all but 502 and the protocol's error body (what
  the proxy answers a refused whole response with; possible for a stream only while the
  proxy has sent nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .agents import AGENTS, GROUPS, Agent
from .run import (
    PATHS,
    RunResult,
    Settings,
    UsageError,
    gather_interruptibly,
    names,
    prepare,
    run_case,
)
from .server import Exchange, FramesReply, Reply, Responder, WholeReply, text_reply
from .tools import has_tool_result, shell_calls
from .wire import PAUSE, bedrock_chunk, converse_event, eventstream_exception, sse_event

__all__ = ["FRAMES", "REASON", "RefusalFrame", "main"]

REASON = (
    "lockgate withheld 1 tool call: stream_ended: stream ended without a terminal event; "
    "nothing executed"
)


@dataclass(frozen=True)
class RefusalFrame:
    protocol: str
    name: str
    today: bool
    build: Callable[[str, int], list[bytes]]  # (model, serial) -> the whole body's frames
    status: int | None = None  # instead of a stream: this status and the whole error body


def _responses_preamble(model: str, serial: int) -> tuple[list[bytes], dict[str, Any]]:
    response = {
        "id": f"resp_hostile_{serial}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "model": model,
        "output": [],
        "usage": None,
        "error": None,
    }
    frames = [
        sse_event(
            "response.created",
            {"type": "response.created", "response": response, "sequence_number": 0},
        ),
        sse_event(
            "response.in_progress",
            {"type": "response.in_progress", "response": response, "sequence_number": 1},
        ),
    ]
    return frames, response


def _responses(kind: str) -> Callable[[str, int], list[bytes]]:
    def build(model: str, serial: int) -> list[bytes]:
        frames, response = _responses_preamble(model, serial)
        nested = {
            "type": "error",
            "error": {
                "type": "server_error",
                "code": "lockgate_stream_ended",
                "message": REASON,
                "param": None,
            },
            "sequence_number": 2,
        }
        flat = {
            "type": "error",
            "code": "server_error",
            "message": REASON,
            "param": None,
            "sequence_number": 2,
        }
        failed = {
            "type": "response.failed",
            "response": {
                **response,
                "status": "failed",
                "error": {"code": "server_error", "message": REASON},
            },
            "sequence_number": 2,
        }
        if kind == "error-nested":
            frames.append(sse_event("error", nested))
        elif kind == "error-flat":
            frames.append(sse_event("error", flat))
        elif kind == "response-failed":
            frames.append(sse_event("response.failed", failed))
        elif kind == "error-then-failed":
            frames.append(sse_event("error", flat))
            frames.append(sse_event("response.failed", {**failed, "sequence_number": 3}))
        elif kind == "error-nested-then-failed":
            frames.append(sse_event("error", nested))
            frames.append(sse_event("response.failed", {**failed, "sequence_number": 3}))
        return frames

    return build


def _chat(kind: str) -> Callable[[str, int], list[bytes]]:
    def build(model: str, serial: int) -> list[bytes]:
        first = {
            "id": f"chatcmpl-hostile-{serial}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": None},
                    "finish_reason": None,
                }
            ],
        }
        error = {
            "message": REASON,
            "type": "server_error",
            "code": "lockgate_stream_ended",
            "param": None,
        }
        frames = [sse_event(None, first)]
        if kind == "error-chunk":
            frames.append(sse_event(None, {"error": error}))
        elif kind == "error-chunk-done":
            frames += [sse_event(None, {"error": error}), b"data: [DONE]\n\n"]
        elif kind == "error-event":
            frames.append(sse_event("error", {"error": error}))
        return frames

    return build


def _anthropic(kind: str) -> Callable[[str, int], list[bytes]]:
    def build(model: str, serial: int) -> list[bytes]:
        message: dict[str, Any] = {
            "id": f"msg_hostile_{serial}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 1},
        }
        frames = [sse_event("message_start", {"type": "message_start", "message": message})]
        error_type = {"error-overloaded": "overloaded_error", "error-api": "api_error"}.get(kind)
        if error_type is not None:
            error = {"type": error_type, "message": REASON}
            frames.append(sse_event("error", {"type": "error", "error": error}))
        return frames

    return build


def _gemini(kind: str) -> Callable[[str, int], list[bytes]]:
    statuses = {
        "error-503": (503, "UNAVAILABLE"),
        "error-500": (500, "INTERNAL"),
        "error-400": (400, "INVALID_ARGUMENT"),
    }
    finishes = {"finish-other": "OTHER", "malformed-call": "MALFORMED_FUNCTION_CALL"}

    def build(model: str, serial: int) -> list[bytes]:
        status = statuses.get(kind)
        if status is not None:
            error = {"code": status[0], "message": REASON, "status": status[1]}
            return [sse_event(None, {"error": error})]
        finish = finishes.get(kind)
        if finish is not None:
            candidate = {
                "content": {"role": "model", "parts": [{"text": ""}]},
                "finishReason": finish,
                "finishMessage": REASON,
                "index": 0,
            }
            chunk = {"candidates": [candidate], "modelVersion": model, "responseId": str(serial)}
            return [sse_event(None, chunk)]
        if kind == "blocked":
            feedback = {"blockReason": "OTHER", "blockReasonMessage": REASON}
            return [sse_event(None, {"promptFeedback": feedback, "modelVersion": model})]
        return []

    return build


def _eventstream(protocol: str, kind: str) -> Callable[[str, int], list[bytes]]:
    exceptions = {
        "exception-model-stream": "modelStreamErrorException",
        "exception-unavailable": "serviceUnavailableException",
    }

    def build(model: str, serial: int) -> list[bytes]:
        if protocol == "bedrock":
            message: dict[str, Any] = {
                "id": f"msg_hostile_{serial}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 100, "output_tokens": 1},
            }
            frames = [bedrock_chunk({"type": "message_start", "message": message})]
        else:
            frames = [converse_event("messageStart", {"role": "assistant"})]
        exception = exceptions.get(kind)
        if exception is not None:
            frames.append(eventstream_exception(exception, REASON))
        return frames

    return build


def _nothing(model: str, serial: int) -> list[bytes]:
    del model, serial
    return []


FRAMES: tuple[RefusalFrame, ...] = (
    RefusalFrame("responses", "error-nested", False, _responses("error-nested")),
    RefusalFrame("responses", "error-flat", False, _responses("error-flat")),
    RefusalFrame("responses", "response-failed", False, _responses("response-failed")),
    RefusalFrame("responses", "error-then-failed", False, _responses("error-then-failed")),
    RefusalFrame(
        "responses", "error-nested-then-failed", True, _responses("error-nested-then-failed")
    ),
    RefusalFrame("responses", "end", False, _responses("end")),
    RefusalFrame("chat", "error-chunk", True, _chat("error-chunk")),
    RefusalFrame("chat", "error-chunk-done", False, _chat("error-chunk-done")),
    RefusalFrame("chat", "error-event", False, _chat("error-event")),
    RefusalFrame("chat", "end", False, _chat("end")),
    RefusalFrame("anthropic", "error-overloaded", True, _anthropic("error-overloaded")),
    RefusalFrame("anthropic", "error-api", True, _anthropic("error-api")),
    RefusalFrame("anthropic", "end", False, _anthropic("end")),
    RefusalFrame("gemini", "error-503", True, _gemini("error-503")),
    RefusalFrame("gemini", "error-500", False, _gemini("error-500")),
    RefusalFrame("gemini", "error-400", False, _gemini("error-400")),
    RefusalFrame("gemini", "finish-other", False, _gemini("finish-other")),
    RefusalFrame("gemini", "malformed-call", False, _gemini("malformed-call")),
    RefusalFrame("gemini", "blocked", False, _gemini("blocked")),
    RefusalFrame("gemini", "end", False, _gemini("end")),
    *(
        RefusalFrame(protocol, kind, kind != "end", _eventstream(protocol, kind))
        for protocol in ("bedrock", "converse")
        for kind in ("exception-model-stream", "exception-unavailable", "end")
    ),
    *(
        RefusalFrame(protocol, "http-502", False, _nothing, status=502)
        for protocol in ("responses", "chat", "anthropic", "gemini", "bedrock", "converse")
    ),
)


def _wire_protocol(agent: Agent) -> str:
    return agent.protocol.split(" ")[0]


@dataclass(frozen=True)
class FrameResponder:
    """The refusal frame for every first request that declares a shell; "done" otherwise."""

    frame: RefusalFrame
    pause: float = 0.5  # seconds between the forwarded events and the refusal frame

    def __call__(self, exchange: Exchange) -> Reply:
        body = exchange.json_body()
        protocol = exchange.protocol
        if body is None or protocol is None:
            return text_reply(exchange)
        if has_tool_result(protocol, body) or shell_calls(protocol, body, "true") is None:
            return text_reply(exchange)
        label = f"frame-{self.frame.name}"
        if not exchange.streaming():
            return WholeReply(whole_refusal(protocol), 502, f"{label} (whole: 502)")
        if self.frame.status is not None:
            return WholeReply(whole_refusal(protocol), self.frame.status, label)
        model = body.get("model")
        model_name = model if isinstance(model, str) else "hostile-model"
        frames = self.frame.build(model_name, exchange.serial)
        forwarded = _FORWARDED[protocol]
        frames = [*frames[:forwarded], PAUSE, *frames[forwarded:]]
        return FramesReply(tuple(frames), pause=self.pause, label=label)


# How many events the proxy forwards before it holds (the rest of each body is the frame).
_FORWARDED = {"responses": 2, "chat": 1, "anthropic": 1, "gemini": 0, "bedrock": 1, "converse": 1}


def whole_refusal(protocol: str) -> dict[str, Any]:
    """The error body the proxy answers a refused whole response with (status 502)."""
    if protocol == "anthropic":
        return {"type": "error", "error": {"type": "api_error", "message": REASON}}
    if protocol in ("bedrock", "converse"):
        return {"message": REASON, "__type": "ModelErrorException"}
    if protocol == "gemini":
        return {"error": {"code": 502, "message": REASON, "status": "UNAVAILABLE"}}
    error = {"type": "server_error", "code": "lockgate_stream_ended", "message": REASON}
    return {"error": {**error, "param": None}}


@dataclass(frozen=True)
class FrameResult:
    agent: str
    protocol: str
    frame: str
    today: bool
    ran: bool
    requests: int  # first-turn requests that got the frame (1: no retry)
    showed_reason: bool
    exit_code: int | None
    timed_out: bool
    seconds: float
    last_line: str
    run: RunResult


def _table(results: Sequence[FrameResult]) -> str:
    lines = [
        "| agent | frame | ran anything | requests | showed lockgate's reason | exit | last line |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        frame = result.frame + (" (today)" if result.today else "")
        status = "timed out" if result.timed_out else str(result.exit_code)
        last = result.last_line.replace("|", "\\|")[:160]
        lines.append(
            f"| {result.agent} | {frame} | {'yes' if result.ran else 'no'} | "
            f"{result.requests} | {'yes' if result.showed_reason else 'no'} | {status} | "
            f"{last} |"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m interop.agents.frames",
        description="each agent against each refusal frame of its protocol",
    )
    parser.add_argument("--agents", default=",".join(GROUPS), help="agents or groups")
    parser.add_argument(
        "--frames", default="", help="frame names, comma-separated (default: all of each)"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per run (60)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (2)")
    parser.add_argument(
        "--pause", type=float, default=0.5, help="seconds before the refusal frame (0.5)"
    )
    parser.add_argument("--cache", type=Path, default=None, help="the npm folder for the agents")
    parser.add_argument("--out", type=Path, default=None, help="the results folder")
    parser.add_argument("--no-install", action="store_true", help="never run npm")
    return parser


async def _run(
    plan: list[tuple[Agent, RefusalFrame]], settings: Settings, jobs: int, pause: float
) -> list[FrameResult]:
    gate = asyncio.Semaphore(jobs)

    async def one(agent: Agent, frame: RefusalFrame) -> FrameResult:
        def responder(command: str) -> Responder:
            del command  # no call is ever sent
            return FrameResponder(frame, pause)

        async with gate:
            run = await run_case(agent, f"frame-{frame.name}", responder, PATHS[0], settings)
        result = FrameResult(
            agent=agent.name,
            protocol=frame.protocol,
            frame=frame.name,
            today=frame.today,
            ran=run.ran,
            requests=len(run.hostile_answers),
            showed_reason=run.showed_lockgate_reason,
            exit_code=run.exit_code,
            timed_out=run.timed_out,
            seconds=run.seconds,
            last_line=run.last_lines[-1] if run.last_lines else "",
            run=run,
        )
        print(
            f"{agent.name:<17} {frame.name:<18} requests={result.requests} "
            f"reason={'yes' if result.showed_reason else 'no '} "
            f"exit={'timeout' if run.timed_out else run.exit_code} {result.last_line[:90]}",
            flush=True,
        )
        return result

    return await gather_interruptibly([one(agent, frame) for agent, frame in plan])


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        agents = names(args.agents, AGENTS, "agent", GROUPS)
        wanted = {p.strip() for p in args.frames.split(",") if p.strip()}
        unknown = wanted - {frame.name for frame in FRAMES}
        if unknown:
            raise UsageError(f"unknown frame {sorted(unknown)[0]!r}")
        if args.timeout <= 0 or args.jobs < 1 or args.pause < 0:
            raise UsageError("--timeout must be positive, --jobs at least 1, --pause not negative")
        installation, out = prepare(args.cache, args.out, not args.no_install, "frames-")
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    settings = Settings(installation, out, args.timeout, 0.0, (), 404, False)
    plan = [
        (AGENTS[name], frame)
        for name in agents
        for frame in FRAMES
        if frame.protocol == _wire_protocol(AGENTS[name]) and (not wanted or frame.name in wanted)
    ]
    print(f"{len(plan)} runs, {args.jobs} at a time, results in {out}", flush=True)
    try:
        results = asyncio.run(_run(plan, settings, args.jobs, args.pause))
    except asyncio.CancelledError:
        print("interrupted: every agent and server stopped", file=sys.stderr)
        return 130
    (out / "frames.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    table = _table(results)
    (out / "frames.md").write_text(table + "\n")
    print()
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
