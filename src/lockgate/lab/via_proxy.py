"""The lab through the proxy (`lockgate lab --via proxy`): every scenario of every protocol
with a gateway (and Bedrock's InvokeModelWithResponseStream, the lab variant
`bedrock-invoke`), played as a deliberately naive client → `lockgate proxy` → the scripted
server. A binary event stream (Bedrock's) the naive client reads as botocore does
(`naive_eventstream`): message by message, until one does not decode, a message cut at the
end dropped.

The naive client is the kind the proxy exists for: it sends the requests `lockgate run`
sent for the scenario (the same turns are consumed, in the same order), reads each answer
to its end however it ends (an error frame, a reset, silence), and then *executes every
tool call it has seen*: every call start its protocol's decoder recognizes in what it
received, whether the stream was complete or not. Each scenario is played three times:

1. `lockgate run` itself, over HTTP (the lab's own run): the reference, the tools it
   executed;
2. the naive client straight to the server: the bytes a client receives without the proxy;
3. the naive client through the proxy.

The proxy runs with `--validate-schemas`: `lockgate run` validates every call against its
tools' schemas, and the requests carry those schemas. A scenario is as expected when the
naive client through the proxy executed exactly the tools `lockgate run` executed (none
where it refused), and every answer the proxy passed is byte for byte what the client
receives directly (keep-alives aside: the proxy passes the upstream's pings at once, ahead
of the frames it holds).

A scenario can say what a client other than lockgate does that `lockgate run` does not
(`Scenario.other_client`):

- it declares tools lockgate cannot (a custom tool, a `namespace` group, the built-in shell
  it executes itself): `lockgate run` refuses their calls (`unsupported_output`,
  `invalid_batch`), and the naive client, sending `lockgate run`'s requests, must execute
  none of them through the proxy either; then the scenario is played once more through the
  proxy with those tools declared in every request, and the naive client must execute
  exactly the calls the scenario says (`OtherClient.executes`): the proxy releases a call of
  a declared tool in a batch it judged whole, and still nothing of a cut or invalid batch;
- it asks for a WebSocket first (`GET` with `Upgrade: websocket` at the request's path, as
  Codex's built-in provider does) and falls back to HTTP on `426`: the proxy must answer
  the upgrade `426` itself and never pass it on (the scripted server, which speaks HTTP
  only, answers an upgrade `426` too: directly, the naive client falls back the same way).

Scenarios whose fault is on the client's side (a close that fails in lockgate's own
transport, the neutral wire) have no wire the proxy could see; they are skipped, with the
reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ResponseFailure
from ..events import ToolCallStarted
from ..eventstream import MEDIA_TYPE as EVENTSTREAM_MEDIA_TYPE
from ..providers.variants import lab_entry, server_provider, with_variants
from ..scripted.renderer import SSE_MEDIA_TYPE, media_type
from ..scripted.scenario import Scenario
from ..sse import ServerSentEvent, SSEDecoder, SSEFramer, canonical_frame
from .naive_eventstream import eventstream_content, eventstream_events
from .runner import LAB_DEADLINE_SECONDS, LAB_IDLE_TIMEOUT_SECONDS, run_scenario
from .scenarios import SCENARIOS, runs_on
from .server import serve_script
from .via_common import (
    NAIVE_HEADERS,
    NAIVE_READ_TIMEOUT_SECONDS,
    ProxyLabResult,
    declaring,
    tally,
)
from .via_websocket import (
    WEBSOCKET_FAULTS,
    WEBSOCKET_FAULTS_BY_NAME,
    run_via_websocket,
    speaks_websocket,
)

__all__ = [
    "NAIVE_READ_TIMEOUT_SECONDS",
    "Answer",
    "ProxyLabResult",
    "ProxyRun",
    "calls_seen",
    "declaring",
    "proxy_lab_runs",
    "run_via_proxy",
    "skip_reason",
    "wire_skip_reason",
]

# The naive client's own WebSocket key (the relay's handshake upstream never carries it).
_NAIVE_WEBSOCKET_KEY = "bGFiLW5haXZlLWNsaWVudA=="


def _relay_handshake(headers: Mapping[str, str]) -> bool:
    """Whether a GET the server saw is the proxy relay's own WebSocket handshake (an
    upgrade with a key of its own), not the client's request passed on."""
    upgrade = headers.get("upgrade", "").lower()
    key = headers.get("sec-websocket-key")
    return "websocket" in upgrade and key is not None and key != _NAIVE_WEBSOCKET_KEY


# The WebSocket opening handshake's headers (RFC 6455 4.1; the key is any 16 bytes, base64).
_UPGRADE = {
    "connection": "Upgrade",
    "upgrade": "websocket",
    "sec-websocket-version": "13",
    "sec-websocket-key": _NAIVE_WEBSOCKET_KEY,
}


@dataclass(frozen=True, slots=True)
class Answer:
    """What the naive client received for one request: the status and every body byte
    until the body ended, broke or went silent."""

    status: int
    body: bytes
    ended: str  # "end", or what broke it


@dataclass(frozen=True, slots=True)
class ProxyRun:
    """One play through the proxy: a scenario on a protocol, the naive client sending the
    requests `lockgate run` sent, or (`declared`) those requests with the tools of the
    scenario's other client declared too."""

    scenario: Scenario
    provider: str
    declared: bool = False
    websocket: bool = False  # over the Responses WebSocket (`via_websocket`)


def skip_reason(scenario: Scenario) -> str | None:
    """Why a scenario is not played through the proxy (None: it is)."""
    if "http" not in scenario.transports:
        return "in-process only: its fault is not on the wire"
    if scenario.options.neutral:
        return "the neutral wire is no protocol a client speaks"
    if scenario.options.close_fails:
        return "its fault (a failing close) is in lockgate's own transport, not on the wire"
    return None


def wire_skip_reason(provider: str) -> str | None:
    """Why a provider's scenarios are not played through the proxy (None: they are): the
    naive client reads SSE bodies and binary event streams (`naive_eventstream`: Bedrock's
    ConverseStream and InvokeModelWithResponseStream), and no other wire."""
    wire = media_type(lab_entry(provider).render())
    if wire not in (SSE_MEDIA_TYPE, EVENTSTREAM_MEDIA_TYPE):
        return f"the naive client reads SSE and the AWS event stream, not {wire}"
    return None


def proxy_lab_runs(
    scenario: Scenario | None, providers: Sequence[str]
) -> tuple[list[ProxyRun], list[tuple[Scenario, str, str]]]:
    """The runs to play through the proxy, and the (scenario, provider) pairs skipped with
    their reason: every scenario (or the one named) on every asked provider with a
    gateway (and its lab variants: Bedrock's invoke, `variants.with_variants`), and once
    more with its tools declared where its other client declares tools."""
    scenarios = SCENARIOS if scenario is None else (scenario,)
    runs: list[ProxyRun] = []
    skipped: list[tuple[Scenario, str, str]] = []
    names = with_variants(providers)
    for candidate in scenarios:
        if candidate.name in WEBSOCKET_FAULTS_BY_NAME:
            continue  # played below, on the WebSocket only
        for name in names:
            if not runs_on(candidate, name) or lab_entry(name).gateway is None:
                continue
            reason = skip_reason(candidate) or wire_skip_reason(name)
            if reason is not None:
                skipped.append((candidate, name, reason))
                continue
            runs.append(ProxyRun(candidate, name))
            if candidate.other_client.declares:
                runs.append(ProxyRun(candidate, name, declared=True))
            if speaks_websocket(name):
                runs.append(ProxyRun(candidate, name, websocket=True))
                if candidate.other_client.declares:
                    runs.append(ProxyRun(candidate, name, declared=True, websocket=True))
    for fault in WEBSOCKET_FAULTS:
        chosen = scenario is None or scenario.name == fault.scenario.name
        for name in names:
            if chosen and fault.scenario.runs_on(name) and speaks_websocket(name):
                runs.append(ProxyRun(fault.scenario, name, websocket=True))
    return runs, skipped


def calls_seen(provider: str, body: bytes) -> int:
    """The tool calls a naive client sees in a body: every call start the protocol's
    decoder recognizes, reading on past whatever it refuses (an event it cannot take is
    skipped, a frame past the size bound ends the reading)."""
    entry = lab_entry(provider)
    assert entry.gateway is not None
    gateway = entry.gateway()
    decoder = gateway.new_decoder()
    if media_type(entry.render()) == EVENTSTREAM_MEDIA_TYPE:
        events = eventstream_events(gateway, body)
    else:
        frames = SSEDecoder()
        try:
            events = frames.feed(body)
            events.extend(frames.finish())
        except Exception:
            return 0
    seen = 0
    for event in events:
        try:
            decoded = decoder.decode(event)
        except Exception:
            continue
        seen += sum(1 for item in decoded if type(item) is ToolCallStarted)
    return seen


def _content(provider: str, body: bytes) -> list[bytes]:
    """What a client reads of a body: its events in the canonical form the proxy sends
    (`sse.canonical_frame`, with the data the protocol's decoder states in one way where
    readers would read it differently: `StreamDecoder.canonical_data`), keep-alives and the
    events the protocol's decoder skips left out (the proxy sends a held stream's
    keep-alives at once, ahead of the frames it holds, and never forwards what it does not
    judge). An event stream's are its messages (`naive_eventstream.eventstream_content`)."""
    entry = lab_entry(provider)
    assert entry.gateway is not None
    gateway = entry.gateway()
    if media_type(entry.render()) == EVENTSTREAM_MEDIA_TYPE:
        return eventstream_content(gateway, body)
    decoder = gateway.new_decoder()
    framer = SSEFramer(len(body) + 1)
    frames = framer.feed(body)
    frames.extend(framer.finish())
    kept: list[bytes] = []
    for frame in frames:
        event = frame.event
        if event is None or gateway.is_keepalive(event) or gateway.skipped(event):
            continue
        try:
            list(decoder.decode(event))
        except ResponseFailure:
            pass  # the proxy refuses it; its bytes are compared as they came
        else:
            data = decoder.canonical_data()
            if data is not None:
                event = ServerSentEvent(event.event, data)
        try:
            kept.append(canonical_frame(event))
        except ResponseFailure:
            kept.append(frame.raw)  # no client may read it: the proxy refuses it
    return kept


@dataclass(frozen=True, slots=True)
class _Played:
    """What the naive client received: the status its WebSocket upgrade got (None: it
    asked for none) and the answer to each request."""

    upgrade: int | None
    answers: list[Answer]


async def _naive(
    url: str, requests: Sequence[Mapping[str, Any]], *, websocket_first: bool = False
) -> _Played:
    """The naive client: a WebSocket upgrade first if asked (it falls back to HTTP
    whatever the answer: it speaks no WebSocket), then each request in turn, each answer
    read to its end."""
    import httpx2

    timeout = httpx2.Timeout(10.0, read=NAIVE_READ_TIMEOUT_SECONDS)
    answers: list[Answer] = []
    upgrade: int | None = None
    async with httpx2.AsyncClient(timeout=timeout, trust_env=False) as http:
        if websocket_first:
            try:
                response = await http.get(url, headers={**NAIVE_HEADERS, **_UPGRADE})
                upgrade = response.status_code
            except httpx2.HTTPError:
                upgrade = 0  # no answer at all
        for body in requests:
            received = bytearray()
            status = 0
            ended = "end"
            try:
                async with http.stream(
                    "POST", url, json=dict(body), headers=NAIVE_HEADERS
                ) as response:
                    status = response.status_code
                    async for piece in response.aiter_raw():
                        received += piece
            except httpx2.HTTPError as exc:
                ended = type(exc).__name__
            answers.append(Answer(status, bytes(received), ended))
    return _Played(upgrade, answers)


async def run_via_proxy(
    scenario: Scenario, provider: str, *, declared: bool = False, websocket: bool = False
) -> ProxyLabResult:
    """Play one scenario three ways (`lockgate run`, naive direct, naive through the proxy)
    and judge what the naive client executed through the proxy (`declared`: its requests
    declare the scenario's other client's tools too; `websocket`: the naive client speaks
    the Responses WebSocket, `via_websocket`)."""
    if websocket:
        result: ProxyLabResult = await run_via_websocket(scenario, provider, declared=declared)
        return result
    from ..proxy import GatingOptions
    from ..proxy.server import ProxyConfig, ProxyRecord, serving

    other = scenario.other_client
    reference = await run_scenario(scenario, "http", provider=provider)
    requests = [declaring(body, other) if declared else body for body in reference.requests]
    expected = other.executes if declared else reference.tools_executed
    websocket_first = other.websocket_first
    renderer = lab_entry(provider).render()
    where = renderer.path + (f"?{renderer.stream_query}" if renderer.stream_query else "")
    turns = scenario.turns()
    serving_provider = server_provider(provider)  # a variant's server is its provider's
    # A client that asks for a WebSocket first meets a server that speaks HTTP only (426):
    # the fall-back path (the server's WebSocket mode is `via_websocket`'s).
    serves_websocket = not websocket_first
    async with serve_script(turns, provider=serving_provider, websocket=serves_websocket) as server:
        origin = f"http://{server.host}:{server.port}"
        direct = (await _naive(origin + where, requests, websocket_first=websocket_first)).answers
    records: list[ProxyRecord] = []
    gating = GatingOptions(
        idle_timeout=LAB_IDLE_TIMEOUT_SECONDS,
        deadline=LAB_DEADLINE_SECONDS,
        keepalive_interval=LAB_DEADLINE_SECONDS,  # no keep-alive within a lab run
        validate_schemas=True,  # `lockgate run` checks its calls against its tools' schemas
    )
    async with serve_script(turns, provider=serving_provider, websocket=serves_websocket) as server:
        upstream = f"http://{server.host}:{server.port}"
        config = ProxyConfig(upstream=upstream, gating=gating)
        async with serving(config, records.append) as running:
            played = await _naive(running.url + where, requests, websocket_first=websocket_first)
        await server.settle()
        # The naive client's one GET is its upgrade: the server must never see it (with or
        # without its `upgrade` header, which a proxy would drop as hop-by-hop). The proxy's
        # relay opens a socket of its own (this HTTP-only server answers it 426, which the
        # client then gets): that handshake carries its own key, never the client's.
        passed_on = [
            request
            for request in server.requests
            if request.method == "GET" and not _relay_handshake(request.headers)
        ]
    via = played.answers
    for _ in range(50):  # the log line of the last request may follow its body
        if len(records) >= len(requests) + (1 if websocket_first else 0):
            break
        await asyncio.sleep(0.01)
    naive_tools = sum(calls_seen(provider, answer.body) for answer in via)
    direct_tools = sum(calls_seen(provider, answer.body) for answer in direct)
    problems: list[str] = []
    if naive_tools != expected:
        problems.append(
            f"the naive client executed {naive_tools} tools through the proxy with its tools "
            f"declared, expected {expected}"
            if declared
            else f"the naive client executed {naive_tools} tools through the proxy, "
            f"lockgate run {reference.tools_executed}"
        )
    if websocket_first and played.upgrade != 426:
        problems.append(
            f"the WebSocket upgrade was answered {played.upgrade} through the proxy, not 426"
        )
    if websocket_first and passed_on:
        problems.append("the WebSocket upgrade reached the server through the proxy")
    passed, withheld = tally(
        [record.outcome for record in records if record.method == "POST"],
        via,
        direct,
        lambda through, plain: (
            (through.status, _content(provider, through.body))
            == (plain.status, _content(provider, plain.body))
        ),
        len(requests),
        problems,
    )
    return ProxyLabResult(
        scenario=scenario,
        provider=provider,
        run_tools=reference.tools_executed,
        naive_tools=naive_tools,
        direct_tools=direct_tools,
        requests=len(requests),
        passed=passed,
        withheld=withheld,
        problems=tuple(problems),
        declared=declared,
        expected_tools=expected,
        upgrade=played.upgrade,
    )
