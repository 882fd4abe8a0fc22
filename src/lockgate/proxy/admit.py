"""The proxy's first stage: whether a request is let in, and what of it goes forward.

In this order: stopping (503), a path the upstream could route differently (400), the client
token (401, `access.py`), a path no route serves (404), a WebSocket upgrade on a gated path
that is not relayed (426: a route with `websocket: refuse`, a protocol without a WebSocket
mode, a request that is no `GET`; Codex then falls back to HTTP at once; a Responses path of
a relaying route goes on, judged as its `POST`, to the relay, `relay.py`), a protocol request
the gate cannot judge (400: Gemini without `alt=sse`), a held key's rules (403: a browser, a rebound
`Host`, a path that is no model request), resuming a Responses stream (400: the request that
named its tools was never seen), the limit of requests at once (`max_streams`: 503). Then the
body: it must arrive within the route's silence limit (408) and within `max_request_bytes`
(413); a protocol request's JSON is bounded (`MAX_REQUEST_VALUES`, `MAX_REQUEST_DEPTH`: 413),
parsed off the event loop when large, and its protocol's own problems answered (400,
`Gateway.request_problem`). The tools a request declares are read here too (once an answer
is to be judged), a schema the gate cannot use said once per tool and problem.

A stage never reaches back into the server: what it needs of the process comes in `Shared`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from ..cassette.recorder import CassetteRecorder
from ..conversation import ToolSpec
from ..credentials import Redactor
from ..events import CALL_CUSTOM
from ..gateway import Gateway
from ..jsonlimits import TooComplex, parse_document
from ..providers.base import Provider
from ..telemetry import NO_TRACING, Tracing
from .access import Access, quoted
from .config import ProxySettings
from .engine import HeldBudget
from .exchange import Body, ProxyExchange
from .flow import Flow
from .respond import Responder, reject
from .routes import Routed, owner, route, ungateable
from .upstream import RouteRuntime

__all__ = [
    "MAX_REQUEST_DEPTH",
    "MAX_REQUEST_VALUES",
    "MAX_SCHEMA_NOTES",
    "PARSE_INLINE_BYTES",
    "Body",
    "Shared",
    "admit",
    "admit_body",
    "declared_tools",
    "parse",
    "read_body",
    "refusal",
    "route_of",
    "speaker",
    "upgrades",
]

MAX_REQUEST_DEPTH = 256  # JSON nesting of a protocol request body
MAX_REQUEST_VALUES = 1_000_000  # JSON values (keys counted) of a protocol request body
PARSE_INLINE_BYTES = 256 * 1024  # a request body this large is parsed off the event loop
MAX_SCHEMA_NOTES = 1000  # the unusable schemas said once each (then no more notes)


class Drainable(Protocol):
    """What the drain tells when the proxy stops (a relayed WebSocket, `relay.py`)."""

    def drain(self) -> None: ...


@dataclass(slots=True)
class Shared:
    """What the stages need of the process, handed in (never reached through the server):
    the settings and routes (secrets read once), who may use it, the held budget, the
    redactor, the recorder, the line writer, the schemas already said; the upstream session
    and the parse pool, open while the application runs."""

    settings: ProxySettings
    routes: tuple[RouteRuntime, ...]
    access: Access
    held: HeldBudget
    redact: Redactor = field(repr=False)
    recorder: CassetteRecorder | None
    warn: Callable[[str], None]
    unusable_schemas: set[tuple[str, str]] = field(default_factory=set)  # (tool, problem)
    session: aiohttp.ClientSession | None = None
    parser: concurrent.futures.ThreadPoolExecutor | None = None
    tracing: Tracing = NO_TRACING  # told of each admitted request and its attempts
    # In flight (the listener stops and cuts; the pipeline counts): stopping, the requests
    # admitted and not ended (and their tasks), cutting what is left after `grace` seconds,
    # the requests answered.
    stopping: bool = False
    active: int = 0
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    cutting: bool = False
    grace: float = 0.0
    answered: int = 0
    relays: set[Drainable] = field(default_factory=set)  # the WebSockets relayed now


# --- the request's head --------------------------------------------------------------------


def admit(x: ProxyExchange, shared: Shared) -> web.Response | None:
    """The request's head: its route, protocol and speaker written on the exchange and its
    flow; the proxy's own answer when it refuses the request (`refusal`), else None."""
    request, flow = x.request, x.flow
    x.query = query = {name: value for name, value in reversed(list(request.rel_url.query.items()))}
    served = route_of(shared, flow.path) if x.path_problem is None else None
    runtime, forwarded = served if served is not None else (shared.routes[0], flow.path)
    # A WebSocket upgrade is judged as the request its messages make (`POST …/responses`).
    method = "POST" if upgrades(request) else request.method
    routed = route(method, forwarded, query) if served is not None else None
    entry = routed.provider if routed is not None else None
    x.served, x.route, x.entry = served is not None, runtime, entry
    x.target = routed.target if routed is not None else None
    flow.protocol = entry.name if entry else None
    flow.route = runtime.settings.name if served is not None else ""
    flow.upstream_path = forwarded
    problem = refusal(
        shared,
        request,
        x.raw_path,
        x.path_problem,
        served,
        forwarded,
        query,
        routed,
        stopping=shared.stopping,
        active=shared.active,
    )
    if problem is not None:
        status, message = problem
        x.speaker = speaker(entry, request, flow.upstream_path or flow.path)
        return reject(flow, x.speaker, status, message, stopping=shared.stopping)
    x.gateway = entry.gateway() if entry and entry.gateway else None
    x.speaker = speaker(entry, request, flow.upstream_path)
    x.respond = Responder(request, flow, runtime.settings.gating.idle_timeout)
    return None


def route_of(shared: Shared, path: str) -> tuple[RouteRuntime, str] | None:
    """The route that serves `path` (`ProxySettings.route`) and the path it forwards."""
    found = shared.settings.route(path)
    if found is None:
        return None
    settings, stripped = found
    return next(runtime for runtime in shared.routes if runtime.settings is settings), stripped


def speaker(entry: Provider | None, request: web.Request, path: str) -> Gateway:
    """The protocol a request speaks: its own when it is a protocol request, else the one
    that claims it (`routes.owner`: Anthropic's and Gemini's SDKs send headers of their
    own), for the form of a held key and of the proxy's own errors."""
    if entry is not None and entry.gateway is not None:
        return entry.gateway()
    query = {name: value for name, value in reversed(list(request.rel_url.query.items()))}
    return owner(path, request.headers, query)


def refusal(
    shared: Shared,
    request: web.Request,
    raw_path: str,
    path_problem: str | None,
    served: tuple[RouteRuntime, str] | None,
    forwarded: str,
    query: Mapping[str, str],
    routed: Routed | None,
    *,
    stopping: bool,
    active: int,
) -> tuple[int, str] | None:
    """Why the proxy answers a request itself (the status and the message), or None."""
    if stopping:
        return 503, "the proxy is stopping"
    if path_problem is not None:
        return 400, (
            f"the request path {quoted(raw_path)} could be routed differently upstream "
            f"({path_problem}); send its plain form"
        )
    as_key = None if served is None else all(item.holds_credentials for item in served[0].upstreams)
    if not shared.access.authorized(request.headers, query, as_key=as_key):
        return 401, "the lockgate client token is missing or wrong"
    if served is None:
        prefixes = ", ".join(route.settings.prefix for route in shared.routes)
        return 404, f"no route of this proxy serves {quoted(request.rel_url.path)} ({prefixes})"
    runtime = served[0]
    upgrade = upgrades(request)
    if upgrade and route("POST", forwarded, query) is not None:
        # Codex tries a WebSocket at its base URL first, and falls back to HTTP at
        # once on 426; a WebSocket is never passed on ungated: relayed, or refused.
        problem = websocket_problem(runtime, request.method, routed)
        if problem is not None:
            return 426, problem
    if routed is not None and routed.target.problem is not None:
        return 400, routed.target.problem
    if any(upstream.holds_credentials for upstream in runtime.upstreams):
        problem = shared.access.held_key_problem(
            request.headers,
            request.headers.getall("host", []),
            "POST" if upgrade else request.method,
            forwarded,
        )
        if problem is not None:
            return 403, problem
    if routed is None:
        values = request.rel_url.query
        reason = ungateable(
            request.method, forwarded, {name: values.getall(name) for name in values}
        )
        if reason is not None:
            return 400, reason
    if active >= shared.settings.max_streams:
        return 503, f"the proxy is at its limit of {shared.settings.max_streams} requests"
    return None


def upgrades(request: web.Request) -> bool:
    """Whether a request asks to switch to a WebSocket."""
    return any(
        part.strip().lower() == "websocket"
        for value in request.headers.getall("upgrade", [])
        for part in value.split(",")
    )


_upgrades = upgrades  # the name other modules knew


def websocket_problem(runtime: RouteRuntime, method: str, routed: Routed | None) -> str | None:
    """Why a WebSocket upgrade on a gated path is answered 426 (None: it is relayed): the
    route refuses them (`websocket: refuse`), its protocol has no WebSocket mode (only
    Responses has), the upgrade is no `GET`, or its upstream signs requests (AWS)."""
    refuse = "; send the request over HTTP"
    if runtime.settings.websocket == "refuse":
        return "this route relays no WebSocket (websocket: refuse)" + refuse
    if routed is None or getattr(routed.gateway, "websocket", None) is None:
        return "a WebSocket on this path cannot be gated (only Responses has one)" + refuse
    if method.upper() != "GET":
        return "a WebSocket upgrade is a GET" + refuse
    if any(upstream.signer is not None for upstream in runtime.upstreams[:1]):
        return "a route whose upstream is signed (AWS) relays no WebSocket" + refuse
    return None


# --- the request's body --------------------------------------------------------------------


async def admit_body(x: ProxyExchange, shared: Shared) -> web.Response | None:
    """The body of an admitted request, written on the exchange (`read_body`); the proxy's
    own answer when it refuses the body, else None."""
    assert x.route is not None
    assert x.speaker is not None
    body = await read_body(shared, x.request, x.flow, x.route, x.gateway, x.speaker)
    if isinstance(body, web.Response):
        return body
    x.body = body
    if x.gateway is not None and body.parsed is not None:
        x.flow.request_model = x.gateway.request_model(x.flow.upstream_path, body.parsed)
    return None


async def read_body(
    shared: Shared,
    request: web.Request,
    flow: Flow,
    route: RouteRuntime,
    gateway: Gateway | None,
    speaker: Gateway,
) -> Body | web.Response:
    """The body, read within the route's silence limit and `max_request_bytes`; a protocol
    request's parsed under the JSON bounds and checked by its protocol. A body the proxy
    refuses: its answer (`respond.reject`)."""
    idle = route.settings.gating.idle_timeout
    try:
        async with asyncio.timeout(idle):
            raw = await request.read()
    except TimeoutError:
        message = f"the request body did not arrive within {idle:g} s"
        return reject(flow, speaker, 408, message)
    except web.HTTPRequestEntityTooLarge:
        limit = shared.settings.max_request_bytes
        return reject(flow, speaker, 413, f"the request body is larger than {limit} bytes")
    parsed: Mapping[str, Any] | None = None
    if gateway is not None:
        try:
            parsed = await parse(shared, raw)
        except TooComplex as exc:
            return reject(flow, speaker, 413, f"the request body {exc}")
        if parsed is not None:
            problem = gateway.request_problem(parsed)
            if problem is not None:
                message, param = problem
                return reject(flow, speaker, 400, message, param=param)
    return Body(raw, parsed)


async def parse(shared: Shared, body: bytes) -> Mapping[str, Any] | None:
    """The request body as a JSON object (None: not one); `TooComplex` over a bound. A large
    body is parsed off the event loop, one at a time."""
    if len(body) <= PARSE_INLINE_BYTES or shared.parser is None:
        return _request_object(body)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(shared.parser, _request_object, body)


def _request_object(body: bytes) -> Mapping[str, Any] | None:
    """The request body as a JSON object, or None (not UTF-8, not JSON, not an object);
    `TooComplex` for one over the bounds (`MAX_REQUEST_VALUES`, `MAX_REQUEST_DEPTH`)."""
    try:
        value = parse_document(body, MAX_REQUEST_DEPTH, MAX_REQUEST_VALUES)
    except TooComplex:
        raise
    except (ValueError, RecursionError):
        return None
    return value if type(value) is dict else None


def declared_tools(
    shared: Shared, gateway: Gateway, request: Mapping[str, Any], route: RouteRuntime, flow: Flow
) -> tuple[ToolSpec, ...]:
    """The tools a request declares; a schema the gate cannot use is counted on the flow
    (`/metrics`) and said once per tool and problem (its calls are then checked as a JSON
    object only)."""
    validate = route.settings.gating.validate_schemas
    tools = gateway.tools(request, validate_schemas=validate)
    notes = shared.unusable_schemas
    flow.unusable_tools = 0  # read again on a retry: counted once per request
    for tool in tools:
        problem = getattr(tool, "schema_problem", None)
        if problem is None:
            continue
        flow.unusable_tools += 1
        if (tool.name, problem) in notes:
            continue
        if len(notes) < MAX_SCHEMA_NOTES:
            notes.add((tool.name, problem))
            shared.warn(
                f"lockgate proxy: the input format of custom tool {quoted(tool.name, 80)} "
                f"is not one the gate can check with ({problem}); its input is accepted "
                "as any text"
                if tool.form == CALL_CUSTOM
                else f"lockgate proxy: the schema of tool {quoted(tool.name, 80)} is not "
                f"one the gate can validate with ({problem}); its calls are checked as a "
                "JSON object only"
            )
    return tools
