"""The upstream that serves given bytes (and keeps the requests), `lockgate proxy` in front of
it, and the endpoint a reader is pointed at."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2
from aiohttp import web

from lockgate.proxy import GatingOptions
from lockgate.proxy.server import ProxyConfig, ProxyRecord, RunningProxy, serving

from ..support import aiohttp_loopback

# --- the upstream and the routes ------------------------------------------------------------


@dataclass(slots=True)
class Upstream:
    """A loopback server answering every request with `body` (200, `text/event-stream`),
    keeping each request's path and JSON body."""

    body: bytes = b""
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    url: str = ""

    async def answer(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
        self.requests.append((request.path, value if isinstance(value, dict) else {}))
        return web.Response(
            status=200, body=self.body, headers={"content-type": "text/event-stream"}
        )


@contextlib.asynccontextmanager
async def upstream_and_proxy(
    gating: GatingOptions, log: Callable[[ProxyRecord], None]
) -> AsyncIterator[tuple[Upstream, RunningProxy]]:
    upstream = Upstream()
    async with (
        aiohttp_loopback(upstream.answer) as upstream.url,
        serving(ProxyConfig(upstream.url, gating=gating), log) as proxy,
    ):
        yield upstream, proxy


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a reader sends its request: the host root, and the `httpx2` client it is given
    (None: the library's own)."""

    route: str
    base: str
    http: Callable[[], httpx2.AsyncClient] | None
