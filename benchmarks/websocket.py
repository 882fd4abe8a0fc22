"""The Responses WebSocket relay's CPU per event, against a WebSocket pass-through in the same
run (opt-in: `python -m benchmarks.websocket [--rounds 5] [--responses 4] [--quick]`).

Three parties on loopback, each proxy in a process of its own: the upstream (this process:
an aiohttp WebSocket server that answers each `response.create` with a prepared Responses
stream, each event one text message), `lockgate proxy --upstream UPSTREAM` (its defaults:
the relay, `/metrics` on, uvloop where installed) and a plain WebSocket pass-through
(`--passthrough`: aiohttp on the same loop, one upstream socket per client socket, every
message copied as it came, pings every 15 s both ways as the relay's, no gate), and the
client (this process: one socket per proxy, the responses one after another, each read to
its terminal).

- **CPU per event**: the proxy process's user + system CPU (/proc/PID/stat) over a batch of
  responses on one socket, divided by the events the upstream sent; the upstream pauses
  ~0.1 ms after each event, so that each reaches a proxy in its own read (as events at
  model speed do, and as the SSE benchmark sends them). Each response: 2,000
  text deltas (`text`), or 1,000 text deltas then one function call in 1,000 argument
  deltas, which lockgate holds to `response.completed` and then releases (`tool call`).
  Paired rounds: in each round both proxies read the same batch, one after the other; the
  ratio is taken within the round (lockgate / pass-through) and the median of the rounds'
  ratios is the figure, with the medians of each side's microseconds per event.

- **The engine alone**: the same streams through `GatingStream` in this process, no socket,
  with the `websocket` framing (units, as the relay feeds it) and with SSE framing: what
  gating costs per event whatever the wire, the best of five.

Target (as for SSE, `benchmarks/proxy.py`): CPU per event <= 1.2x the pass-through for text
and <= 1.1x for a held tool call. Prints MET / NOT MET; exits 0 unless something failed to
run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import WSMsgType, web

from lockgate.providers import provider
from lockgate.proxy.engine import Accepted, GatingOptions, GatingStream
from lockgate.proxy.framing.websocket import Units, message_type, unit

__all__ = ["main"]

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAUSE_SECONDS = 0.0001  # after each event, as `benchmarks/proxy.py`'s server pauses
TARGETS = {"text": 1.2, "tool call": 1.1}
_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "edit",
    "description": "edit a file",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
        "required": ["path", "text"],
    },
}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / CLOCK_TICKS


def _events(kind: str, deltas: int) -> list[str]:
    """One Responses stream as compact JSON messages."""
    base = {"id": "resp_bench", "object": "response", "status": "in_progress", "output": []}
    sequence = 0
    out: list[str] = []

    def emit(payload: dict[str, Any]) -> None:
        nonlocal sequence
        out.append(json.dumps({**payload, "sequence_number": sequence}, separators=(",", ":")))
        sequence += 1

    emit({"type": "response.created", "response": base})
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    text_deltas = deltas if kind == "text" else deltas // 2
    emit({"type": "response.output_item.added", "output_index": 0, "item": message})
    place = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    part = {"type": "output_text", "text": "", "annotations": []}
    emit({"type": "response.content_part.added", **place, "part": part})
    for number in range(text_deltas):
        emit({"type": "response.output_text.delta", **place, "delta": f"w{number % 97} "})
    text = "".join(f"w{number % 97} " for number in range(text_deltas))
    emit({"type": "response.output_text.done", **place, "text": text})
    done_part = {**part, "text": text}
    emit({"type": "response.content_part.done", **place, "part": done_part})
    message_done = {**message, "status": "completed", "content": [done_part]}
    emit({"type": "response.output_item.done", "output_index": 0, "item": message_done})
    output: list[dict[str, Any]] = [message_done]
    if kind == "tool call":
        arguments = json.dumps({"path": "a.py", "text": "x" * (deltas - deltas // 2)})
        pieces = [arguments[i : i + 1] for i in range(len(arguments))][: deltas - deltas // 2]
        rest = arguments[len(pieces) :]
        call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "edit"}
        emit(
            {
                "type": "response.output_item.added",
                "output_index": 1,
                "item": {**call, "arguments": ""},
            }
        )
        for piece in [*pieces[:-1], pieces[-1] + rest]:
            emit(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": "fc_1",
                    "output_index": 1,
                    "delta": piece,
                }
            )
        emit(
            {
                "type": "response.function_call_arguments.done",
                "item_id": "fc_1",
                "output_index": 1,
                "arguments": arguments,
            }
        )
        call_done = {**call, "arguments": arguments, "status": "completed"}
        emit({"type": "response.output_item.done", "output_index": 1, "item": call_done})
        output.append(call_done)
    emit(
        {
            "type": "response.completed",
            "response": {**base, "status": "completed", "output": output},
        }
    )
    return out


# --- the engine alone (in this process, no socket) ---------------------------------------------


class _Messages:
    """A response's messages as the relay hands them to the engine (`ResumableBody`)."""

    def __init__(self, messages: list[bytes]) -> None:
        self._messages = iter(messages)

    async def read_chunk(self) -> bytes:
        message = next(self._messages, None)
        if message is None:
            return b""
        message_type(message)  # as the relay's body looks for the terminal
        return unit(message)

    async def aclose(self) -> None:
        pass

    def __aiter__(self) -> AsyncIterator[bytes]:
        raise NotImplementedError  # read by `read_chunk`


async def _sse(messages: list[bytes]) -> AsyncIterator[bytes]:
    for message in messages:
        yield b"event: " + (message_type(message) or "").encode() + b"\ndata: " + message + b"\n\n"


async def engine_cost(events: list[str], repeats: int = 5) -> dict[str, float]:
    """CPU seconds per event of the engine alone, with each framing (best of `repeats`)."""
    entry = provider("responses")
    messages = [event.encode() for event in events]
    request = {"model": "m", "input": "hi", "tools": [_TOOL]}
    costs: dict[str, float] = {}
    for framing in ("websocket", "sse"):
        best = float("inf")
        for _ in range(repeats):
            body: Any = _Messages(messages) if framing == "websocket" else _sse(messages)
            started = time.process_time()
            stream = GatingStream(entry, request, body, GatingOptions(), framing=framing)
            units = Units(1 << 32)
            async for piece in stream:
                if framing == "websocket":
                    units.feed(piece)
            best = min(best, time.process_time() - started)
            if not isinstance(stream.outcome, Accepted):
                raise RuntimeError(f"the engine refused the benchmark's stream ({framing})")
        costs[framing] = best / len(messages)
    return costs


# --- the upstream -------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def upstream(streams: dict[str, list[str]]) -> AsyncIterator[str]:
    async def answer(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(compress=False)
        await ws.prepare(request)
        async for message in ws:
            if message.type is not WSMsgType.TEXT:
                break
            value = json.loads(message.data)
            if value.get("type") == "response.create":
                for event in streams[value["metadata"]["kind"]]:
                    await ws.send_str(event)
                    await asyncio.sleep(PAUSE_SECONDS)  # each event in a read of its own
        return ws

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


# --- the pass-through (`--passthrough UPSTREAM`, in a process of its own) -----------------------


async def passthrough(origin: str) -> None:
    session = aiohttp.ClientSession()

    async def answer(request: web.Request) -> web.StreamResponse:
        # pings both ways, as the relay (and any relay that notices a dead peer) keeps them
        up = await session.ws_connect(origin + request.path, decode_text=False, heartbeat=15.0)
        client = web.WebSocketResponse(decode_text=False, heartbeat=15.0)
        await client.prepare(request)

        async def pump(source: Any, sink: Any) -> None:
            async for message in source:
                if message.type is WSMsgType.TEXT:
                    await sink.send_frame(message.data, WSMsgType.TEXT)
                else:
                    break
            await sink.close()

        await asyncio.gather(pump(client, up), pump(up, client), return_exceptions=True)
        return client

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"proxying at http://127.0.0.1:{runner.addresses[0][1]} -> {origin}", flush=True)
    await asyncio.Event().wait()


# --- the proxies, the client ----------------------------------------------------------------------


@dataclass
class Proxy:
    name: str
    process: asyncio.subprocess.Process
    url: str

    def cpu(self) -> float:
        return cpu_seconds(self.process.pid)


async def launch(name: str, argv: list[str]) -> Proxy:
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
    found = re.match(r"proxying at (\S+) -> ", line)
    if found is None:
        process.kill()
        raise RuntimeError(f"{name} did not start: {line.strip()}")
    return Proxy(name, process, found.group(1).rstrip("/"))


async def batch(proxy: Proxy, kind: str, responses: int, events: int) -> float:
    """CPU seconds per event of one batch through `proxy` (one socket)."""
    request = {
        "type": "response.create",
        "model": "m",
        "input": "hi",
        "tools": [_TOOL],
        "metadata": {"kind": kind},
    }
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(proxy.url + "/v1/responses", max_msg_size=0) as ws,
    ):
        before = proxy.cpu()
        for _ in range(responses):
            await ws.send_str(json.dumps(request))
            while True:
                message = await ws.receive(timeout=60)
                if message.type is not WSMsgType.TEXT:
                    raise RuntimeError(f"{proxy.name}: the socket ended ({message.type})")
                if '"response.completed"' in message.data[:40]:
                    break
                if message.data.startswith('{"type":"error"'):
                    raise RuntimeError(f"{proxy.name}: refused: {message.data[:300]}")
        spent = proxy.cpu() - before
    return spent / (responses * events)


async def run(arguments: argparse.Namespace) -> int:
    deltas = 400 if arguments.quick else 2000
    streams = {kind: _events(kind, deltas) for kind in TARGETS}
    failed = False
    async with upstream(streams) as origin:
        lockgate = await launch(
            "lockgate",
            [sys.executable, "-m", "lockgate", "proxy", "--upstream", origin, "--port", "0"],
        )
        plain = await launch(
            "pass-through", [sys.executable, "-m", "benchmarks.websocket", "--passthrough", origin]
        )
        try:
            for proxy in (lockgate, plain):  # warm up
                await batch(proxy, "text", 1, len(streams["text"]))
            print(
                f"events per response: text {len(streams['text'])}, "
                f"tool call {len(streams['tool call'])}; {arguments.responses} responses a "
                f"batch, {arguments.rounds} rounds"
            )
            for kind in TARGETS:
                alone = await engine_cost(streams[kind])
                print(
                    f"{kind}, the engine alone (no socket): websocket framing "
                    f"{alone['websocket'] * 1e6:.1f} us/event, SSE framing "
                    f"{alone['sse'] * 1e6:.1f} us/event"
                )
            for kind, target in TARGETS.items():
                count = len(streams[kind])
                ratios, ours, theirs = [], [], []
                for _ in range(arguments.rounds):
                    mine = await batch(lockgate, kind, arguments.responses, count)
                    base = await batch(plain, kind, arguments.responses, count)
                    ours.append(mine)
                    theirs.append(base)
                    ratios.append(mine / base if base else float("inf"))
                ratio = statistics.median(ratios)
                verdict = "MET" if ratio <= target else "NOT MET"
                print(
                    f"{kind}: lockgate {statistics.median(ours) * 1e6:.1f} us/event, "
                    f"pass-through {statistics.median(theirs) * 1e6:.1f} us/event, "
                    f"ratio {ratio:.2f} (rounds {', '.join(f'{r:.2f}' for r in ratios)}; "
                    f"target <= {target}): {verdict}",
                    flush=True,
                )
        except Exception as exc:
            print(f"failed: {exc}", flush=True)
            failed = True
        finally:
            for proxy in (lockgate, plain):
                with contextlib.suppress(ProcessLookupError):
                    proxy.process.terminate()
                await proxy.process.wait()
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.websocket")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--responses", type=int, default=4)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--passthrough", metavar="UPSTREAM")
    arguments = parser.parse_args(argv)
    from lockgate.proxy.loop_policy import run as run_on_loop

    if arguments.passthrough:
        run_on_loop(passthrough(arguments.passthrough))
        return 0
    return run_on_loop(run(arguments))


if __name__ == "__main__":
    raise SystemExit(main())
