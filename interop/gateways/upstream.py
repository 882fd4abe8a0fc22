"""A loopback "provider" that misbehaves on purpose, one scenario per model name.

`FaultServer` speaks streaming Chat Completions (`POST …/chat/completions`) and Anthropic
Messages (`POST …/messages`) over raw asyncio streams, so that every way a gateway sees a
provider fail can be produced exactly: an error status with its headers, a TCP reset before
the head (SO_LINGER 0), silence, a clean end of the body before the stream's own end, a
reset mid-stream, the protocol's in-stream error. The request's `model` names the scenario
(a fall-back that rewrites the model lands on another scenario); each scenario is a list of
attempts, the n-th request of a run getting the n-th attempt (the last repeats): a run is
the requests whose prompt carries one marker, `[run ID]`. `GET /__counts`
answers how many requests each scenario received; `POST /__reset` forgets them.

Run on its own (for poking at it with curl): `python -m interop.gateways.upstream --port N`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import re
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .model import EDIT_TOOL, GOOD, Answer, Attempt, Scenario, ToolCall
from .scenarios import ALL_SCENARIOS

__all__ = [
    "EDIT_TOOL",
    "GOOD",
    "Answer",
    "Attempt",
    "FaultServer",
    "Scenario",
    "ToolCall",
]

Protocol = Literal["chat", "anthropic"]

# A run's marker in its prompt: requests are told apart by it (a gateway may still be sending
# an earlier run's request when the next run starts).
RUN_MARKER = re.compile(r"\[run ([0-9a-f]{8,32})\]")


# --- rendering --------------------------------------------------------------------------------


def _sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def chat_frames(answer: Answer, model: str, usage: bool) -> list[tuple[str, bytes]]:
    """The answer as Chat Completions chunks, each labelled."""
    base: dict[str, Any] = {
        "id": "chatcmpl-fault",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
    }
    base["model"] = model

    def chunk(delta: Mapping[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": dict(delta), "finish_reason": finish}
        return _sse({**base, "choices": [choice]})

    frames = [("start", chunk({"role": "assistant", "content": ""}))]
    frames += [("text", chunk({"content": piece})) for piece in answer.text]
    for index, call in enumerate(answer.calls):
        opening = {
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        frames.append(("call", chunk({"tool_calls": [opening]})))
        for piece in call.arguments:
            more = {"index": index, "function": {"arguments": piece}}
            frames.append(("args", chunk({"tool_calls": [more]})))
    frames.append(("finish", chunk({}, answer.finish)))
    if usage:
        counts = {"prompt_tokens": 12, "completion_tokens": 20, "total_tokens": 32}
        frames.append(("usage", _sse({**base, "choices": [], "usage": counts})))
    frames.append(("done", _sse("[DONE]")))
    return frames


def anthropic_frames(answer: Answer, model: str) -> list[tuple[str, bytes]]:
    """The answer as Anthropic Messages events, each labelled."""
    message: dict[str, Any] = {
        "id": "msg_fault",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 1},
    }
    frames = [("start", _sse({"type": "message_start", "message": message}, "message_start"))]
    block = 0
    if answer.text:
        start = {"type": "content_block_start", "index": 0}
        start["content_block"] = {"type": "text", "text": ""}
        frames.append(("text-start", _sse(start, "content_block_start")))
        for piece in answer.text:
            delta = {"type": "text_delta", "text": piece}
            event = {"type": "content_block_delta", "index": 0, "delta": delta}
            frames.append(("text", _sse(event, "content_block_delta")))
        stop = {"type": "content_block_stop", "index": 0}
        frames.append(("text-stop", _sse(stop, "content_block_stop")))
        block = 1
    for offset, call in enumerate(answer.calls):
        index = block + offset
        content = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        start = {"type": "content_block_start", "index": index, "content_block": content}
        frames.append(("call", _sse(start, "content_block_start")))
        for piece in call.arguments:
            delta = {"type": "input_json_delta", "partial_json": piece}
            event = {"type": "content_block_delta", "index": index, "delta": delta}
            frames.append(("args", _sse(event, "content_block_delta")))
        stop = {"type": "content_block_stop", "index": index}
        frames.append(("call-stop", _sse(stop, "content_block_stop")))
    reason = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}[answer.finish]
    finish = {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": None},
        "usage": {"output_tokens": 20},
    }
    frames.append(("finish", _sse(finish, "message_delta")))
    frames.append(("done", _sse({"type": "message_stop"}, "message_stop")))
    return frames


def error_frame(protocol: Protocol) -> bytes:
    """The protocol's in-stream error, as the providers send it."""
    if protocol == "anthropic":
        overloaded = {"type": "overloaded_error", "message": "Overloaded"}
        return _sse({"type": "error", "error": overloaded}, "error")
    error: dict[str, Any] = {
        "message": "The server had an error while processing your request.",
        "type": "server_error",
        "param": None,
        "code": "server_error",
    }
    return _sse({"error": error})


def error_body(protocol: Protocol, attempt: Attempt) -> bytes:
    if protocol == "anthropic":
        kind = {429: "rate_limit_error", 529: "overloaded_error"}.get(attempt.status, "api_error")
        payload: dict[str, Any] = {
            "type": "error",
            "error": {"type": kind, "message": attempt.message},
        }
    else:
        code = "rate_limit_exceeded" if attempt.status == 429 else None
        payload = {
            "error": {
                "message": attempt.message,
                "type": attempt.error_type,
                "param": None,
                "code": code,
            }
        }
    return json.dumps(payload).encode()


def frames_until_end(frames: Sequence[tuple[str, bytes]], attempt: Attempt) -> list[bytes]:
    """The frames sent before the attempt's end happens."""
    if attempt.end == "complete":
        return [data for _, data in frames]
    if attempt.after is None:
        return []
    sent: list[bytes] = []
    seen = 0
    for label, data in frames:
        sent.append(data)
        if label == attempt.after:
            seen += 1
            if seen == attempt.occurrence:
                return sent
    raise ValueError(f"no frame {attempt.after!r} #{attempt.occurrence} in the answer")


# --- the server ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Received:
    """One request the server received."""

    scenario: str
    protocol: Protocol
    path: str
    body: dict[str, Any]
    at: float  # the event loop's time when it arrived
    run: str  # the run marker its prompt carries (`[run ID]`), or ""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class FaultServer:
    """The loopback provider (`async with FaultServer(scenarios) as server`)."""

    scenarios: Mapping[str, Scenario]
    host: str = "127.0.0.1"
    port: int = 0
    received: list[Received] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def __aenter__(self) -> FaultServer:
        self._server = await asyncio.start_server(self._connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        await self._server.wait_closed()

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def of_run(self, run: str, scenarios: Sequence[str]) -> list[Received]:
        """The requests of one run (its prompt's marker) for these scenarios."""
        return [r for r in self.received if r.run == run and r.scenario in scenarios]

    def count(self, scenario: str, run: str = "") -> int:
        return len(self.of_run(run, (scenario,)))

    @staticmethod
    def gaps(requests: Sequence[Received]) -> list[float]:
        """The seconds between consecutive requests."""
        times = [request.at for request in requests]
        return [round(later - earlier, 2) for earlier, later in itertools.pairwise(times)]

    def reset(self) -> None:
        self.received.clear()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._tasks.discard(task)
            if not writer.is_closing():
                writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        body = await _read_body(reader, headers)
        path = target.split("?", 1)[0]
        if path == "/__counts":
            counts: dict[str, int] = {}
            for request in self.received:
                counts[request.scenario] = counts.get(request.scenario, 0) + 1
            await _respond(writer, 200, (), json.dumps(counts).encode())
            return
        if path == "/__reset":
            self.reset()
            await _respond(writer, 200, (), b"{}")
            return
        protocol: Protocol | None = None
        if method == "POST" and path.endswith("/chat/completions"):
            protocol = "chat"
        elif method == "POST" and path.endswith("/messages"):
            protocol = "anthropic"
        if protocol is None:
            await _respond(writer, 404, (), b'{"error": {"message": "no such path"}}')
            return
        try:
            request = json.loads(body)
        except ValueError:
            await _respond(writer, 400, (), b'{"error": {"message": "not JSON"}}')
            return
        model = str(request.get("model", ""))
        scenario = self.scenarios.get(model)
        if scenario is None:
            message = json.dumps({"error": {"message": f"no scenario {model!r}"}}).encode()
            await _respond(writer, 404, (), message)
            return
        marker = RUN_MARKER.search(body.decode("utf-8", "replace"))
        run = marker.group(1) if marker else ""
        attempt = scenario.attempt(self.count(model, run))
        now = asyncio.get_running_loop().time()
        self.received.append(Received(model, protocol, path, request, now, run, headers))
        await self._answer(reader, writer, protocol, request, attempt)

    async def _answer(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        protocol: Protocol,
        request: Mapping[str, Any],
        attempt: Attempt,
    ) -> None:
        if attempt.reset_before_head:
            _reset(writer)
            return
        if attempt.status != 200:
            await _respond(writer, attempt.status, attempt.headers, error_body(protocol, attempt))
            return
        model = str(request.get("model", ""))
        if protocol == "anthropic":
            frames = anthropic_frames(attempt.answer, model)
        else:
            options = request.get("stream_options") or {}
            usage = isinstance(options, dict) and bool(options.get("include_usage"))
            frames = chat_frames(attempt.answer, model, usage)
        head = (
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            "transfer-encoding: chunked\r\nconnection: close\r\n"
        )
        head += "".join(f"{name}: {value}\r\n" for name, value in attempt.headers) + "\r\n"
        writer.write(head.encode("latin-1"))
        await writer.drain()
        for data in frames_until_end(frames, attempt):
            await asyncio.sleep(0.02)  # a read each: what a gateway forwards as it comes
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
        if attempt.end == "complete" or attempt.end == "clean":
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        elif attempt.end == "error":
            data = error_frame(protocol)
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
            await writer.drain()
        elif attempt.end == "reset":
            await asyncio.sleep(0.05)  # the frames before leave first
            _reset(writer)
        else:  # silent: until the peer gives up (EOF), at most `silence_seconds`
            with contextlib.suppress(TimeoutError, ConnectionError):
                await asyncio.wait_for(reader.read(), attempt.silence_seconds)
            _reset(writer)


async def _read_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        pieces: list[bytes] = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return b"".join(pieces)
            pieces.append(await reader.readexactly(size))
            await reader.readexactly(2)
    length = int(headers.get("content-length", "0") or 0)
    return await reader.readexactly(length) if length else b""


async def _respond(
    writer: asyncio.StreamWriter, status: int, headers: Sequence[tuple[str, str]], body: bytes
) -> None:
    reasons = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests"}
    reasons |= {500: "Internal Server Error", 503: "Service Unavailable", 529: "Overloaded"}
    lines = [f"HTTP/1.1 {status} {reasons.get(status, 'Error')}"]
    lines += ["content-type: application/json", f"content-length: {len(body)}"]
    lines += ["connection: close"] + [f"{name}: {value}" for name, value in headers]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    await writer.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0), not a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()

    async def serve() -> None:
        async with FaultServer({s.name: s for s in ALL_SCENARIOS}, port=args.port) as server:
            print(f"serving on {server.origin}: models {', '.join(s.name for s in ALL_SCENARIOS)}")
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
