"""The one object passed forward through the proxy's stages (`pipeline.py`): a `ProxyExchange`
per request, built by the listener (`server.py`) with the request's head, and filled in by
each stage with its own fields only: admission (`admit.py`) its route, protocol, speaker and
body; the attempts (`attempt.py`) the attempt in turn, the answer's head sorted into a mode
(`Answer`) and the refusal a stream whose head already went ends with; the writer
(`respond.py`) whether the head went out (`committed`). Data only: no stage's behaviour and
no answer is built here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web
from multidict import CIMultiDict

from ..gateway import Gateway, ProtocolTarget, Refusal
from ..providers.base import Provider
from ..telemetry import NO_TRACING, RequestTrace
from .failover import FailoverPlan
from .flow import Flow
from .respond import Responder
from .upstream import RouteRuntime, UpstreamRuntime

__all__ = ["Answer", "Body", "Mode", "ProxyExchange", "RouteRuntime", "UpstreamRuntime"]

# How an answer's head is taken (`attempt.py` sorts it, once): passed as it comes, an error
# status, a stream through the gate, a whole answer judged.
Mode = Literal["pass", "error", "stream", "whole"]

_UNTRACED: RequestTrace = NO_TRACING.request({}, 0.0)


@dataclass(frozen=True, slots=True)
class Body:
    """A request's body as admitted: its bytes, and its JSON object (None: not a protocol
    request, or not a JSON object: sent as it is)."""

    raw: bytes
    parsed: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Answer:
    """An upstream answer's head, as the attempt stage sorted it: its status, the headers
    the client would get (redacted of a held key) and its mode."""

    status: int
    headers: CIMultiDict[str] = field(compare=False)
    mode: Mode


@dataclass(eq=False, slots=True)
class ProxyExchange:
    """One request through the stages (see the module docstring). The listener sets the
    head's fields; the rest start empty and are written by the stage that owns them."""

    request: web.Request
    flow: Flow  # the record observers read
    raw_path: str
    path_problem: str | None = None  # why the path could be routed differently upstream
    # --- admission (`admit.py`) ---------------------------------------------------------
    query: Mapping[str, str] = field(default_factory=dict)  # the first value of each name
    served: bool = False  # a route serves the path (else `route` is the first, for its limits)
    route: RouteRuntime | None = None
    entry: Provider | None = None  # the protocol's provider (None: passed through)
    gateway: Gateway | None = None
    target: ProtocolTarget | None = None
    speaker: Gateway | None = None  # whose error shape the proxy's own answers take
    body: Body | None = None
    respond: Responder | None = None  # the only writer to the client, once admitted
    trace: RequestTrace = _UNTRACED  # the tracer's record of this request
    # --- the attempts (`attempt.py`) ------------------------------------------------------
    attempt: int = 0  # attempts upstream before this one
    plan: FailoverPlan | None = None  # the route's failover plan for this request
    deadline_at: float = math.inf  # the route's deadline over every attempt (monotonic)
    upstream: UpstreamRuntime | None = None  # this attempt's
    model: str | None = None  # the model this attempt sends in place of the request's
    attempt_started: float = 0.0  # when this attempt began (monotonic)
    last_sent: float = 0.0  # when the proxy last wrote to the client while it waited
    status: int | None = None  # this attempt's upstream status (None: no answer)
    answer: Answer | None = None  # this attempt's answer head, sorted (None: not yet)
    seen: bool = False  # content of this attempt's answer reached the client: no retry
    # The refusal of the proxy's own answer (an error it gives), for a stream whose head
    # already went: its frame ends that stream instead.
    refusal: Refusal | None = None

    @property
    def parsed(self) -> Mapping[str, Any] | None:
        """The request body's JSON object (None: not a protocol request, or not an object)."""
        return None if self.body is None else self.body.parsed

    @property
    def committed(self) -> bool:
        """Whether the client's head went out (`Responder.commit`, the one commit point)."""
        return self.respond is not None and self.respond.committed
