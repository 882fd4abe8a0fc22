"""The client token never goes upstream (issue 27, finding 4): with a key held on some route,
a client that shows the token as its API key on a route — or a fall-back — that holds no key
must not have it forwarded, in any credential shape (`Authorization: Bearer`, `x-api-key`,
`api-key`, `x-goog-api-key`, Gemini's `key=`). Whoever runs that upstream could otherwise
spend every key the proxy holds. Each upstream here records what it received."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from lockgate.proxy.config import (
    ProxySettings,
    RouteRetries,
    RouteSettings,
    SecretSource,
    UpstreamSettings,
    describe,
    key_warnings,
)
from lockgate.proxy.server import TOKEN_HEADER, serving

from ..helpers import finish
from .test_server import gating, serve_app

HELD_KEY = "sk-held-KEY-upstreams-4242"
TOKEN = "lockgate-team-TOKEN-upstreams-9191"
CLIENT_KEY = "sk-client-OWN-key-3131"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}

# Each place a client may put its API key: (headers, query).
SHAPES: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "bearer": ({"authorization": f"Bearer {TOKEN}"}, {}),
    "x-api-key": ({"x-api-key": TOKEN}, {}),
    "api-key": ({"api-key": TOKEN}, {}),
    "x-goog-api-key": ({"x-goog-api-key": TOKEN}, {}),
    "key=": ({}, {"key": TOKEN}),
}


@dataclass
class Recorder:
    """An upstream that keeps every request's headers and raw query, and answers `status`."""

    status: int = 200
    seen: list[tuple[str, dict[str, str], str]] = field(default_factory=list)

    async def answer(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        headers = {name.lower(): value for name, value in request.headers.items()}
        self.seen.append((request.path, headers, request.rel_url.raw_query_string))
        if self.status != 200:
            return web.json_response({"error": {"message": "overloaded"}}, status=self.status)
        return web.json_response({"object": "list", "data": []})

    def saw_token(self) -> bool:
        return any(
            TOKEN in value or TOKEN in query
            for _, headers, query in self.seen
            for value in headers.values()
        )


def upstream(url: str, key: str | None) -> UpstreamSettings:
    return UpstreamSettings(url, SecretSource(value=key) if key is not None else None)


@contextlib.asynccontextmanager
async def proxy(*routes: RouteSettings) -> AsyncIterator[str]:
    held = Recorder()
    async with serve_app(held.answer) as held_origin:
        keyed = RouteSettings("keyed", "/keyed", upstream(held_origin, HELD_KEY), gating())
        settings = ProxySettings((keyed, *routes), client_token=SecretSource(value=TOKEN))
        async with serving(settings) as running:
            yield running.url
    assert not held.saw_token()


async def send(
    method: str,
    url: str,
    headers: dict[str, str],
    query: dict[str, str],
    body: Any = None,
) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method,
            url,
            headers=headers,
            params=query,
            data=None if body is None else json.dumps(body).encode(),
        ) as response,
    ):
        return response.status, await response.read()


@pytest.mark.parametrize("shape", SHAPES)
async def test_the_token_as_a_key_is_refused_on_a_keyless_route_and_never_forwarded(
    shape: str,
) -> None:
    recorder = Recorder()
    async with serve_app(recorder.answer) as origin:
        open_route = RouteSettings("open", "/open", upstream(origin, None), gating())
        async with proxy(open_route) as url:
            headers, query = SHAPES[shape]
            status, body = await send("GET", url + "/open/v1/models", headers, query)
    assert status == 401, body
    assert recorder.seen == []
    assert TOKEN.encode() not in body


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_keyless_route_gets_the_clients_credentials_but_never_the_token(
    shape: str,
) -> None:
    recorder = Recorder()
    async with serve_app(recorder.answer) as origin:
        open_route = RouteSettings("open", "/open", upstream(origin, None), gating())
        async with proxy(open_route) as url:
            headers, query = SHAPES[shape]
            shown = {TOKEN_HEADER: TOKEN, "x-other": "kept", **headers}
            status, _ = await send("GET", url + "/open/v1/models", shown, {**query, "q": "1"})
            # The client's own key, in the same place, goes as it came.
            own = {name: value.replace(TOKEN, CLIENT_KEY) for name, value in {**headers}.items()}
            own_query = {name: value.replace(TOKEN, CLIENT_KEY) for name, value in query.items()}
            status_own, _ = await send(
                "GET", url + "/open/v1/models", {TOKEN_HEADER: TOKEN, **own}, own_query
            )
    assert (status, status_own) == (200, 200)
    (_, first, first_query), (_, second, second_query) = recorder.seen
    assert not recorder.saw_token()
    assert first["x-other"] == "kept"
    assert first_query == "q=1"
    assert TOKEN_HEADER not in first
    assert CLIENT_KEY in " ".join([*second.values(), second_query])


@pytest.mark.parametrize(
    "keyless_first", [False, True], ids=["keyless-fallback", "keyless-primary"]
)
@pytest.mark.parametrize("shape", SHAPES)
async def test_no_attempt_of_a_mixed_route_sends_the_token_to_its_keyless_upstream(
    shape: str, keyless_first: bool
) -> None:
    failing, keyless = Recorder(status=503), Recorder()
    async with (
        serve_app(failing.answer) as failing_origin,
        serve_app(keyless.answer) as keyless_origin,
    ):
        if keyless_first:  # the keyless upstream answers; the fall-back holds a key
            keyless.status = 503
            first, then = upstream(keyless_origin, None), upstream(failing_origin, HELD_KEY)
        else:
            first, then = upstream(failing_origin, HELD_KEY), upstream(keyless_origin, None)
        mixed = RouteSettings(
            "mixed", "/mixed", first, gating(), RouteRetries(2, 1.0), fallbacks=(then,)
        )
        async with proxy(mixed) as url:
            headers, query = SHAPES[shape]
            chat = url + "/mixed/v1/chat/completions"
            refused, _ = await send("POST", chat, headers, query, CHAT)
            assert refused == 401  # as a key, not on a route that holds none
            assert (failing.seen, keyless.seen) == ([], [])
            await send("POST", chat, {TOKEN_HEADER: TOKEN, **headers}, query, CHAT)
    assert keyless.seen
    assert failing.seen
    assert not keyless.saw_token()
    assert not failing.saw_token()
    for _, headers_seen, _ in failing.seen:  # the one that holds a key gets it
        assert headers_seen["authorization"] == f"Bearer {HELD_KEY}"


def test_check_says_when_a_route_holds_a_key_on_some_upstreams_only() -> None:
    mixed = RouteSettings(
        "mixed",
        "/mixed",
        upstream("https://api.openai.com", None),
        gating(),
        RouteRetries(1),
        fallbacks=(upstream("http://127.0.0.1:8000", None), upstream("https://x.test", "k" * 20)),
    )
    whole = RouteSettings("whole", "/whole", upstream("https://api.openai.com", "k" * 20), gating())
    settings = ProxySettings((mixed, whole), client_token=SecretSource(value=TOKEN))
    (line,) = key_warnings(settings)
    assert line.startswith("warning: route mixed: its upstream and fall-back 1 hold no key")
    assert "x-lockgate-token" in line
    assert describe(settings)[-1] == line
    assert key_warnings(ProxySettings((whole,))) == []


def test_the_proxy_says_it_when_it_starts(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(
        "client_token: {env: LG_TOKEN}\n"
        "routes:\n"
        "  - name: mixed\n"
        "    upstream: 'http://127.0.0.1:9'\n"
        "    key: {env: LG_KEY}\n"
        "    retries: {attempts: 1}\n"
        "    fallbacks: [{upstream: 'http://127.0.0.1:10'}]\n"
    )
    environment = {k: v for k, v in os.environ.items() if not k.startswith("LG_")}
    environment.update({"LG_TOKEN": TOKEN, "LG_KEY": HELD_KEY})
    process = subprocess.Popen(
        [sys.executable, "-m", "lockgate", "proxy", "--config", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=environment,
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    process.send_signal(signal.SIGTERM)
    code, _, err = finish(process)
    assert code == 0, err
    assert first.startswith("proxying at http://127.0.0.1:")
    assert err.splitlines()[0] == (
        "lockgate proxy: warning: route mixed: fall-back 1 holds no key while another "
        "upstream of the route does: the client's own credentials go there, so clients must "
        "show the client token in x-lockgate-token (as their API key it is refused)"
    )
    assert TOKEN not in first + err
    assert HELD_KEY not in first + err
