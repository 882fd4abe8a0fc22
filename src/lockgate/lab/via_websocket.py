"""`lockgate lab --via proxy` over the Responses WebSocket: every Responses scenario, and the
WebSocket faults (`WEBSOCKET_FAULTS`), played by a naive WebSocket client → the proxy's
relay (`websocket: relay`, its default) → the scripted server's WebSocket mode
(`lab.websocket`).

The naive client reads the relay's messages the way Codex does: it opens one socket, sends
each request `lockgate run` sent for the scenario as a `response.create` message on it,
reads the response's messages until its terminal one (`response.completed`, `.incomplete`,
`.failed`, `error`), and *executes each call as soon as its output item is done*
(`response.output_item.done` of a call the client runs: a function call, a custom tool
call, a shell call), whether the response then completes or not. A socket that closes,
breaks or stays silent (the client's own silence limit) ends the response, and after an
`error` message the client drops the socket, as Codex does; the next request then opens a
new socket. A scenario is as expected when the client executed through the proxy
exactly what `lockgate run` executed over HTTP (or, with the other client's tools declared,
what the scenario states), and each response the relay passed is, message for message, what
the client receives straight from the server.

`lockgate run` itself has no WebSocket transport: the reference is its HTTP run of the same
turns (the scripted server plays the same events either way). The WebSocket faults are
played on one request of `lockgate run`'s (`reset-mid-stream`'s first): each sends an edit
the naive client, straight from the server, executes (its output item is done) and then
breaks the response; through the proxy nothing may run, and the relay's reason must be the
fault's (`WebSocketFault.kind`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import FailureKind
from ..scripted.renderer import WebSocketRenderer
from ..scripted.scenario import Scenario, failure
from ..scripted.script import Faults, Turn
from ..scripted.websocket import Message, WebSocketFaults, message_actions
from .via_common import (
    NAIVE_HEADERS,
    NAIVE_READ_TIMEOUT_SECONDS,
    ProxyLabResult,
    declaring,
    tally,
)

__all__ = [
    "EXECUTED_ITEMS",
    "WEBSOCKET_FAULTS",
    "WEBSOCKET_FAULTS_BY_NAME",
    "WebSocketAnswer",
    "WebSocketFault",
    "calls_done",
    "naive_websocket",
    "run_via_websocket",
    "speaks_websocket",
]

# The output items a client executes itself (`response.output_item.done` of these).
EXECUTED_ITEMS = frozenset(
    {"function_call", "custom_tool_call", "shell_call", "local_shell_call", "apply_patch_call"}
)
TERMINAL_TYPES = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error"}
)
# The proxy's keep-alive interval in the no-pong fault's run (pong due within half of it).
FAULT_KEEPALIVE_SECONDS = 0.5
_MAX_ANSWER_SECONDS = 10.0
_MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # a larger message ends the naive client's socket


def speaks_websocket(provider: str) -> bool:
    """Whether the scripted server of `provider` has a WebSocket mode (Responses)."""
    from ..providers.variants import lab_entry, server_provider

    return server_provider(provider) == provider and isinstance(
        lab_entry(provider).render(), WebSocketRenderer
    )


@dataclass(frozen=True, slots=True)
class WebSocketAnswer:
    """What the naive client received for one request on a socket: the upgrade's status
    (101, or the refusal's), the messages, and how the response ended."""

    upgrade: int
    messages: tuple[str, ...]
    ended: str  # the terminal message's type, or "closed 1006", "silence" …


def calls_done(messages: Sequence[str]) -> int:
    """The calls a Codex-like client executes from a response's messages: each call item
    it runs itself, as soon as its `response.output_item.done` arrives."""
    done = 0
    for text in messages:
        try:
            value: Any = json.loads(text)
        except ValueError:
            continue
        if type(value) is not dict or value.get("type") != "response.output_item.done":
            continue
        item = value.get("item")
        if type(item) is dict and item.get("type") in EXECUTED_ITEMS:
            done += 1
    return done


def _terminal(text: str) -> str | None:
    try:
        value: Any = json.loads(text)
    except ValueError:
        return None
    kind = value.get("type") if type(value) is dict else None
    return kind if kind in TERMINAL_TYPES else None


async def naive_websocket(
    url: str,
    requests: Sequence[Mapping[str, Any]],
    headers: Mapping[str, str],
    read_timeout: float,
) -> list[WebSocketAnswer]:
    """The naive WebSocket client (see the module's docstring): each request a
    `response.create` on the open socket (a new one after a socket ended)."""
    import aiohttp

    answers: list[WebSocketAnswer] = []
    async with aiohttp.ClientSession() as session:
        socket: aiohttp.ClientWebSocketResponse | None = None
        try:
            for body in requests:
                if socket is None or socket.closed:
                    try:
                        socket = await session.ws_connect(
                            url,
                            headers=dict(headers),
                            max_msg_size=_MAX_MESSAGE_BYTES,
                            autoping=True,
                        )
                    except aiohttp.WSServerHandshakeError as exc:
                        answers.append(WebSocketAnswer(exc.status, (), "refused"))
                        socket = None
                        continue
                    except aiohttp.ClientError as exc:
                        answers.append(WebSocketAnswer(0, (), type(exc).__name__))
                        socket = None
                        continue
                message = {"type": "response.create"}
                message.update((k, v) for k, v in body.items() if k != "stream")
                messages: list[str] = []
                ended = await _read_response(socket, message, messages, read_timeout)
                answers.append(WebSocketAnswer(101, tuple(messages), ended))
                if ended in ("silence", "error"):
                    await socket.close()  # Codex drops a socket after an error message
        finally:
            if socket is not None:
                await socket.close()
    return answers


async def _read_response(
    socket: Any, message: Mapping[str, Any], messages: list[str], read_timeout: float
) -> str:
    """Send one `response.create` and read its messages until the response ends."""
    import aiohttp

    try:
        await socket.send_str(json.dumps(message))
    except (ConnectionError, aiohttp.ClientError):
        return "send failed"
    started = time.monotonic()
    while time.monotonic() - started < _MAX_ANSWER_SECONDS:
        try:
            received = await socket.receive(timeout=read_timeout)
        except TimeoutError:
            return "silence"
        if received.type == aiohttp.WSMsgType.TEXT:
            messages.append(received.data)
            terminal = _terminal(received.data)
            if terminal is not None:
                return terminal
        elif received.type == aiohttp.WSMsgType.BINARY:
            messages.append(received.data.decode("utf-8", "replace"))
        else:
            return f"closed {socket.close_code}"
    return "endless"


@dataclass(frozen=True, slots=True)
class WebSocketFault:
    """A fault only a WebSocket has, played on one edit: the relay must refuse the response
    with `kind` (nothing executed), where the naive client straight from the server would
    have executed the edit."""

    scenario: Scenario
    kind: str
    because: str  # what the refusal's reason names (the close code, the missing pong)
    keepalive: float | None = None  # the proxy's keep-alive interval for this run


def _edit_turn(extra: WebSocketFaults, before_last: int) -> Turn:
    """A complete, valid edit whose last `before_last` messages the fault replaces."""
    from ..providers.responses.render import RENDERER
    from .scenarios import SCENARIOS_BY_NAME

    base = SCENARIOS_BY_NAME["websocket-upgrade"].turns()[0]
    plain = dataclasses.replace(base, faults=Faults(fragment_sizes=(4096,)))
    sent = sum(1 for action in message_actions(plain, RENDERER) if isinstance(action, Message))
    at = sent - before_last
    placed = WebSocketFaults(
        close_after=at if extra.close_after is not None else None,
        close_code=extra.close_code,
        cut_after=at if extra.cut_after is not None else None,
        silent_after=at if extra.silent_after is not None else None,
        pong=extra.pong,
    )
    return dataclasses.replace(plain, websocket=placed)


def _fault(
    name: str,
    summary: str,
    kind: FailureKind,
    because: str,
    extra: WebSocketFaults,
    **more: Any,
) -> WebSocketFault:
    scenario = Scenario(
        name,
        summary,
        failure(kind),
        lambda: [_edit_turn(extra, 1)],
        protocols=frozenset({"responses"}),
    )
    return WebSocketFault(scenario, kind.value, because, **more)


WEBSOCKET_FAULTS: tuple[WebSocketFault, ...] = (
    _fault(
        "ws-close-1006",
        "the edit's item done, then the TCP connection closed without a close frame (1006)",
        FailureKind.TRANSPORT,
        "(1006)",
        WebSocketFaults(close_after=0, close_code=1006),
    ),
    _fault(
        "ws-close-1011",
        "the edit's item done, then a close frame 1011 (internal error) before completed",
        FailureKind.TRANSPORT,
        "(1011)",
        WebSocketFaults(close_after=0, close_code=1011),
    ),
    _fault(
        "ws-message-cut",
        "the edit's item done, then response.completed's frame cut in half, connection closed",
        FailureKind.TRANSPORT,
        "(1006)",
        WebSocketFaults(cut_after=0),
    ),
    _fault(
        "ws-silence",
        "the edit's item done, then silence (pings answered): the idle timeout",
        FailureKind.IDLE_TIMEOUT,
        "no bytes for",
        WebSocketFaults(silent_after=0),
    ),
    _fault(
        "ws-no-pong",
        "the edit's item done, then silence and the proxy's ping never answered",
        FailureKind.TRANSPORT,
        "pong",
        WebSocketFaults(silent_after=0, pong=False),
        keepalive=FAULT_KEEPALIVE_SECONDS,
    ),
)
WEBSOCKET_FAULTS_BY_NAME = {fault.scenario.name: fault for fault in WEBSOCKET_FAULTS}


_FAULT_REQUESTS: list[Mapping[str, Any]] = []


async def _fault_requests() -> list[Mapping[str, Any]]:
    """The one request a WebSocket fault is played on: `lockgate run`'s first request in
    `reset-mid-stream` (its tools, its schemas), run once."""
    from .runner import run_scenario
    from .scenarios import SCENARIOS_BY_NAME

    if not _FAULT_REQUESTS:
        reference = await run_scenario(
            SCENARIOS_BY_NAME["reset-mid-stream"], "http", provider="responses"
        )
        _FAULT_REQUESTS.append(reference.requests[0])
    return list(_FAULT_REQUESTS)


async def run_via_websocket(scenario: Scenario, provider: str, *, declared: bool = False) -> Any:
    """Play one scenario (or a WebSocket fault) three ways over the WebSocket: `lockgate
    run` over HTTP (the reference; a fault's is that no call runs), the naive WebSocket
    client straight to the server, and through the proxy's relay; returns a
    `via_proxy.ProxyLabResult` (`websocket` set)."""
    from ..proxy import GatingOptions
    from ..proxy.server import ProxyConfig, ProxyRecord, serving
    from .runner import LAB_DEADLINE_SECONDS, LAB_IDLE_TIMEOUT_SECONDS, run_scenario
    from .server import serve_script

    fault = WEBSOCKET_FAULTS_BY_NAME.get(scenario.name)
    other = scenario.other_client
    if fault is not None:
        requests = await _fault_requests()
        run_tools = expected = 0
    else:
        reference = await run_scenario(scenario, "http", provider=provider)
        requests = [declaring(body, other) if declared else body for body in reference.requests]
        run_tools = reference.tools_executed
        expected = other.executes if declared else run_tools
    path = "/v1/responses"
    turns = scenario.turns()
    async with serve_script(turns, provider=provider) as server:
        url = f"http://{server.host}:{server.port}{path}"
        direct = await naive_websocket(url, requests, NAIVE_HEADERS, NAIVE_READ_TIMEOUT_SECONDS)
    records: list[ProxyRecord] = []
    keepalive = fault.keepalive if fault is not None and fault.keepalive else None
    gating = GatingOptions(
        idle_timeout=LAB_IDLE_TIMEOUT_SECONDS,
        deadline=LAB_DEADLINE_SECONDS,
        keepalive_interval=keepalive or LAB_DEADLINE_SECONDS,
        validate_schemas=True,
    )
    async with serve_script(turns, provider=provider) as server:
        config = ProxyConfig(upstream=f"http://{server.host}:{server.port}", gating=gating)
        async with serving(config, records.append) as running:
            via = await naive_websocket(
                running.url + path, requests, NAIVE_HEADERS, NAIVE_READ_TIMEOUT_SECONDS
            )
        await server.settle()
    for _ in range(50):  # a response's log line may follow its last message
        if sum(1 for record in records if record.method == "WS") >= len(requests):
            break
        await asyncio.sleep(0.01)
    responses = [record for record in records if record.method == "WS"]
    naive_tools = sum(calls_done(answer.messages) for answer in via)
    direct_tools = sum(calls_done(answer.messages) for answer in direct)
    problems: list[str] = []
    if naive_tools != expected:
        problems.append(
            f"the naive WebSocket client executed {naive_tools} tools through the proxy, "
            f"expected {expected}"
        )
    if any(answer.upgrade != 101 for answer in via):
        problems.append("a socket through the proxy was not opened (101)")
    if fault is not None:
        if direct_tools == 0:
            problems.append("straight from the server the fault executed nothing: not hostile")
        reasons = [record.reason or "" for record in responses]
        kinds = [reason.partition(":")[0] for reason in reasons]
        if kinds != [fault.kind]:
            problems.append(f"the relay refused with {kinds}, expected [{fault.kind!r}]")
        elif fault.because.lower() not in reasons[0].lower():
            problems.append(f"the relay's reason does not name {fault.because!r}")
    passed, withheld = tally(
        [record.outcome for record in responses],
        via,
        direct,
        lambda through, plain: _parsed(through.messages) == _parsed(plain.messages),
        len(requests),
        problems,
        "response",
        "the messages",
    )
    return ProxyLabResult(
        scenario=scenario,
        provider=provider,
        run_tools=run_tools,
        naive_tools=naive_tools,
        direct_tools=direct_tools,
        requests=len(requests),
        passed=passed,
        withheld=withheld,
        problems=tuple(problems),
        declared=declared,
        expected_tools=expected,
        upgrade=via[0].upgrade if via else None,
        websocket=True,
    )


def _parsed(messages: Sequence[str]) -> list[Any]:
    """Messages as a client reads them (JSON values; what is not JSON, as its text)."""
    values: list[Any] = []
    for text in messages:
        try:
            values.append(json.loads(text))
        except ValueError:
            values.append(text)
    return values
