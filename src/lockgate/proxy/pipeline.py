"""The proxy's stages in their order, written once: `run` takes one request (a `ProxyExchange`
its listener built) through admission (`admit.py`: the head, then the body), the attempts
(`attempt.py`: each upstream in turn, its answer gated or judged and written by
`respond.py`), and tells the observers: the flow's hooks when an admitted request starts and
when any request ends (in a `finally`), the tracer one request trace per admitted request,
ended with its summary (`summary`). An observer that fails never fails a request.

It also keeps the process's in-flight count (`Shared.active`, its tasks), which admission
reads for the limit of requests at once and the listener for stopping.

A WebSocket upgrade admitted on a Responses path goes to the relay (`relay.py`) instead of
the body and the attempts: the socket counts as one request in flight while it is open, and
each response on it is a flow of its own (the hooks are told of those); the upgrade's own
flow is told only when no socket opened (refused, or the upstream refused it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence

from aiohttp import web

from . import admit, attempt, relay
from .admit import Shared
from .exchange import ProxyExchange
from .flow import FlowHook, notify_done, notify_started
from .traced import OPERATIONS, summary

__all__ = ["OPERATIONS", "run", "summary"]


async def run(x: ProxyExchange, shared: Shared, hooks: Sequence[FlowHook]) -> web.StreamResponse:
    """One request through the stages; its answer (written, or to be written by aiohttp)."""
    flow = x.flow
    task = asyncio.current_task()
    counted = False
    relayed = False
    try:
        local = admit.admit(x, shared)
        if local is not None:
            return local
        shared.active += 1
        counted = True
        if task is not None:
            shared.tasks.add(task)
        if admit.upgrades(x.request) and x.entry is not None and x.gateway is not None:
            # Admitted on a gated path (else it was answered 426): relayed. An upgrade on a
            # path no gateway serves goes on as any other request (its hop-by-hop dropped).
            relayed = True  # told per response, once its socket opened (status 101)
            return await relay.serve(x, shared, hooks)
        notify_started(hooks, flow)
        with contextlib.suppress(Exception):  # a tracer that fails never fails a request
            x.trace = shared.tracing.request(x.request.headers, flow.started)
        local = await admit.admit_body(x, shared)
        if local is not None:
            return local
        return await attempt.attempts(x, shared)
    except asyncio.CancelledError:
        if shared.cutting:
            flow.outcome = "cut"
            flow.reason = f"the proxy stopped: cut after the {shared.grace:g} s grace period"
        else:
            flow.outcome = "abandoned"
        raise
    finally:
        if x.respond is not None:
            x.respond.stop()
        if counted:
            shared.active -= 1
            if task is not None:
                shared.tasks.discard(task)
        flow.ended = time.monotonic()
        if not relayed or flow.status != 101:  # a relayed socket's responses were told
            shared.answered += 1
            notify_done(hooks, flow)
        if flow.admitted:
            with contextlib.suppress(Exception):
                x.trace.end(summary(flow, _streaming(x)))


def _streaming(x: ProxyExchange) -> bool:
    """Whether the request asked for a streamed answer (else: whether it got one)."""
    if x.gateway is not None and x.parsed is not None and x.target is not None:
        with contextlib.suppress(Exception):
            return x.gateway.wants_stream(x.parsed, x.target)
    return x.answer is not None and x.answer.mode == "stream"
