"""Which requests `lockgate proxy` serves, before anything reaches the upstream: a web page
may never spend the key the proxy holds (H3), the held key goes only with model requests and
model listings, a path is routed by its plain form and an ambiguous one refused (L1), a
resumed Responses stream is refused (L13), a Chat request for several choices is refused at
once (L4)."""

from __future__ import annotations

import asyncio
import json
import shutil
import textwrap
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web
from yarl import URL

from lockgate.proxy.server import TOKEN_HEADER

from .support import request_for
from .test_server import (
    HELD_KEY,
    INVALID_SECOND,
    PATHS,
    TOKEN,
    proxy_to,
    raw_exchange,
    scripted,
    serve_app,
)


class Upstream:
    """An upstream that answers every request 200 with a small JSON body and keeps what it
    was sent (method, path and query as received, headers by their lower-case names)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str]]] = []

    async def answer(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        headers = {name.lower(): value for name, value in request.headers.items()}
        self.seen.append((request.method, request.raw_path, headers))
        return web.json_response({"object": "list", "data": []})


async def send(
    method: str, url: str | URL, headers: dict[str, str] | None = None, body: Any = None
) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.request(
            method,
            url,
            headers=headers,
            data=None if body is None else json.dumps(body).encode(),
        ) as response,
    ):
        return response.status, await response.read()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def carries_the_key(headers: dict[str, str]) -> bool:
    """The held key went with the request, in its OpenAI or its Anthropic form."""
    return f"Bearer {HELD_KEY}" == headers.get("authorization") or (
        headers.get("x-api-key") == HELD_KEY
    )


def message_of(body: bytes) -> str:
    payload = json.loads(body)
    message: str = payload["error"]["message"]
    return message


# --- H3: a web page may never spend the held key ----------------------------------------


BROWSER_HEADERS = {
    "rebound-host": {"Host": "rebind.attacker.example:{port}"},
    "rebound-same-origin-fetch": {
        "Host": "rebind.attacker.example:{port}",
        "Sec-Fetch-Site": "same-origin",
        "Sec-Fetch-Mode": "cors",
        "Sec-Fetch-Dest": "empty",
    },
    "no-cors-image": {
        "Sec-Fetch-Site": "cross-site",
        "Sec-Fetch-Mode": "no-cors",
        "Sec-Fetch-Dest": "image",
    },
    "navigation": {
        "Sec-Fetch-Site": "none",
        "Sec-Fetch-Mode": "navigate",
        "Sec-Fetch-Dest": "document",
        "Sec-Fetch-User": "?1",
    },
    "cross-origin": {"Origin": "http://127.0.0.1:1"},
}


@pytest.mark.parametrize("kind", list(BROWSER_HEADERS))
async def test_a_web_page_may_not_spend_the_held_key(kind: str) -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base, api_key=HELD_KEY) as proxied:
        url = proxied.proxy.url
        headers = {
            name: value.format(port=port_of(url)) for name, value in BROWSER_HEADERS[kind].items()
        }
        status, body = await send("GET", url + "/v1/models", headers)
    assert status == 403, body
    assert "lockgate proxy: " in message_of(body)
    assert upstream.seen == []
    [record] = proxied.records
    assert (record.outcome, record.status) == ("rejected", 403)


@pytest.mark.parametrize(
    ("host", "allow"),
    [
        (None, ()),  # the client's own: 127.0.0.1:PORT
        ("localhost:{port}", ()),
        ("LocalHost.:{port}", ()),
        ("127.0.0.1", ()),
        ("[::1]:{port}", ()),
        ("proxy.internal:{port}", ("proxy.internal",)),
        ("PROXY.internal", ("proxy.internal",)),
    ],
)
async def test_api_clients_keep_the_held_key(host: str | None, allow: tuple[str, ...]) -> None:
    upstream = Upstream()
    async with (
        serve_app(upstream.answer) as base,
        proxy_to(base, api_key=HELD_KEY, allow_hosts=allow) as proxied,
    ):
        url = proxied.proxy.url
        # Node's fetch (undici) sends `sec-fetch-mode: cors` on every request, alone.
        headers = {"sec-fetch-mode": "cors"}
        if host is not None:
            headers["Host"] = host.format(port=port_of(url))
        status, body = await send("GET", url + "/v1/models", headers)
    assert status == 200, body
    [(_, _, sent)] = upstream.seen
    assert carries_the_key(sent)


async def test_a_name_not_allowed_is_refused_even_when_others_are() -> None:
    upstream = Upstream()
    async with (
        serve_app(upstream.answer) as base,
        proxy_to(base, api_key=HELD_KEY, allow_hosts=("proxy.internal",)) as proxied,
    ):
        status, body = await send(
            "GET", proxied.proxy.url + "/v1/models", {"Host": "proxy.internal.attacker.example"}
        )
    assert status == 403
    assert "--allow-host" in message_of(body)
    assert upstream.seen == []


def test_a_bad_allowed_host_name_is_refused() -> None:
    from lockgate.proxy.server import ProxyConfig

    for name in ("", "a b", "http://x", "x:80", "x/y"):
        with pytest.raises(ValueError, match="allow_hosts: "):
            ProxyConfig("https://api.example", allow_hosts=(name,))


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_nodes_own_fetch_keeps_the_held_key() -> None:
    """The Node SDKs (and so Claude Code and the Gemini CLI) send through Node's fetch:
    `sec-fetch-mode: cors` on every request. It must not count as a browser."""
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base, api_key=HELD_KEY) as proxied:
        script = textwrap.dedent(
            f"""
            const response = await fetch({json.dumps(proxied.proxy.url + "/v1/models")});
            console.log(response.status);
            """
        )
        process = await asyncio.create_subprocess_exec(
            "node",
            "--input-type=module",
            "-e",
            script,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
    assert out.decode().strip() == "200", err.decode()
    [(_, _, sent)] = upstream.seen
    assert sent.get("sec-fetch-mode") == "cors"
    assert carries_the_key(sent)


# --- the held key goes only with model requests and model listings ------------------------

WITH_THE_KEY = [
    ("GET", "/v1/models"),
    ("GET", "/v1/models/gpt-4.1"),
    ("GET", "/v1/models?client_version=0.72.0"),  # Codex
    ("POST", "/v1/messages/count_tokens"),  # Claude Code, the Anthropic SDK
    ("POST", "/v1/responses/input_tokens"),
    ("POST", "/v1/responses/compact"),  # Codex
    ("GET", "/openai/v1/models"),  # a gateway's own prefix
]
WITHOUT_THE_KEY = [
    ("GET", "/v1/files"),
    ("POST", "/v1/files"),
    ("GET", "/v1/files/file-abc/content"),
    ("GET", "/v1/batches"),
    ("GET", "/v1/responses/resp_1"),
    ("DELETE", "/v1/models/ft:gpt-4.1:org::abc"),
    ("POST", "/v1/models"),
    ("GET", "/v1/organization/users"),
    ("POST", "/v1/embeddings"),
]


@pytest.mark.parametrize(("method", "path"), WITH_THE_KEY)
async def test_model_listings_and_token_counts_get_the_held_key(method: str, path: str) -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base, api_key=HELD_KEY) as proxied:
        body = {"model": "m", "input": "x"} if method == "POST" else None
        status, answer = await send(method, proxied.proxy.url + path, None, body)
    assert status == 200, answer
    [(_, sent_path, sent)] = upstream.seen
    assert sent_path == path
    assert carries_the_key(sent)


@pytest.mark.parametrize(("method", "path"), WITHOUT_THE_KEY)
async def test_other_paths_do_not_get_the_held_key(method: str, path: str) -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base, api_key=HELD_KEY) as proxied:
        status, answer = await send(method, proxied.proxy.url + path)
    assert status == 403, answer
    assert "--key-on-any-path" in message_of(answer)
    assert upstream.seen == []
    [record] = proxied.records
    assert (record.outcome, record.status) == ("rejected", 403)


@pytest.mark.parametrize(("method", "path"), WITHOUT_THE_KEY[:3])
async def test_key_on_any_path_sends_it_everywhere(method: str, path: str) -> None:
    upstream = Upstream()
    async with (
        serve_app(upstream.answer) as base,
        proxy_to(base, api_key=HELD_KEY, key_on_any_path=True) as proxied,
    ):
        status, _ = await send(method, proxied.proxy.url + path)
    assert status == 200
    [(_, _, sent)] = upstream.seen
    assert carries_the_key(sent)


async def test_without_a_held_key_every_path_passes() -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        status, _ = await send(
            "GET", proxied.proxy.url + "/v1/files", {"Host": "rebind.attacker.example"}
        )
    assert status == 200
    assert len(upstream.seen) == 1


# --- L1: routing by the plain path ----------------------------------------------------------


async def test_a_percent_encoded_protocol_path_is_gated_as_its_plain_form() -> None:
    async with scripted("chat", [INVALID_SECOND]) as (server, proxied):
        url = URL(proxied.proxy.url + "/v1/chat/complet%69ons", encoded=True)
        status, body = await send("POST", url, {"content-type": "application/json"}, None)
        assert status == 400  # an empty body: the upstream's own answer, consumed no turn
        status, body = await send("POST", url, None, request_for("chat"))
    assert status == 200
    assert [r.path for r in server.requests if r.consumed_turn] == ["/v1/chat/completions"]
    assert b"lockgate withheld 2 tool calls" in body
    assert [(r.path, r.protocol) for r in proxied.records] == [
        ("/v1/chat/completions", "chat"),
        ("/v1/chat/completions", "chat"),
    ]
    assert proxied.records[-1].outcome == "withheld"


AMBIGUOUS = [
    "/v1/chat%2Fcompletions",
    "/v1/chat%2fcompletions",
    "/v1/chat/completions%2F",
    "/v1/chat%5Ccompletions",
    "/v1/chat/complet%2569ons",
    "/v1/chat/completions%00",
    "/v1/%2e%2e/v1/chat/completions",
    "/v1/%2E/chat/completions",
    "/v1/./chat/completions",
    "/v1/x/../chat/completions",
    "/v1/chat/completions/.",
    "//v1/chat/completions",
    "/v1//chat/completions",
    "/v1/chat/completions;x=1",
    "/v1/CHAT/completions",
    "/V1/Messages",
]


@pytest.mark.parametrize("path", AMBIGUOUS)
async def test_an_ambiguous_path_is_refused_before_the_upstream(path: str) -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        body = json.dumps(request_for("chat")).encode()
        answer = await raw_exchange(
            proxied.proxy.url,
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body,
        )
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), answer[:300]
    assert "lockgate proxy: " in message_of(payload)
    assert upstream.seen == []
    [record] = proxied.records
    assert (record.outcome, record.status) == ("rejected", 400)


@pytest.mark.parametrize(
    "path", ["/v1/models/a%20b", "/v1/files/file-1/content?x=%2F", "/v1/models/"]
)
async def test_a_plain_pass_through_path_is_sent_as_it_came(path: str) -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        status, _ = await send("GET", URL(proxied.proxy.url + path, encoded=True))
    assert status == 200
    [(_, sent_path, _)] = upstream.seen
    assert sent_path == path


# --- L13: a resumed Responses stream --------------------------------------------------------


@pytest.mark.parametrize("query", ["stream=true", "stream=True&starting_after=7", "stream=1"])
async def test_resuming_a_response_stream_is_refused_before_the_upstream(query: str) -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        status, body = await send("GET", proxied.proxy.url + f"/v1/responses/resp_1?{query}")
    assert status == 400
    assert "cannot be gated" in message_of(body)
    assert upstream.seen == []
    [record] = proxied.records
    assert (record.outcome, record.status, record.protocol) == ("rejected", 400, None)


async def test_the_openai_sdk_raises_on_a_resumed_stream() -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url=proxied.proxy.url + "/v1", max_retries=0
        )
        async with client:
            with pytest.raises(openai.BadRequestError) as raised:
                await client.responses.retrieve("resp_1", stream=True)
            plain = await client.with_raw_response.models.list()
    assert "cannot be gated" in str(raised.value)
    assert plain.status_code == 200
    assert [path for _, path, _ in upstream.seen] == ["/v1/models"]


async def test_retrieving_a_response_without_a_stream_passes() -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        status, _ = await send("GET", proxied.proxy.url + "/v1/responses/resp_1?stream=false")
    assert status == 200
    assert len(upstream.seen) == 1


# --- L4: several Chat choices ---------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 8, 2.0])
async def test_chat_with_several_choices_is_refused_before_the_upstream(n: float) -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        status, body = await send(
            "POST", proxied.proxy.url + PATHS["chat"], None, {**request_for("chat"), "n": n}
        )
    assert status == 400
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "n"
    assert "one choice" in error["message"]
    assert upstream.seen == []
    [record] = proxied.records
    assert (record.outcome, record.status, record.protocol) == ("rejected", 400, "chat")
    assert record.reason is not None
    assert "n = " in record.reason


@pytest.mark.parametrize("n", [1, None])
async def test_chat_with_one_choice_passes(n: int | None) -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        await send("POST", proxied.proxy.url + PATHS["chat"], None, {**request_for("chat"), "n": n})
    assert len(upstream.seen) == 1
    assert proxied.records[0].outcome != "rejected"


async def test_the_openai_sdk_raises_on_several_choices_without_retrying() -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url=proxied.proxy.url + "/v1", max_retries=2
        )
        async with client:
            with pytest.raises(openai.BadRequestError) as raised:
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}], n=3
                )
    assert "one choice" in str(raised.value)
    assert upstream.seen == []
    assert len(proxied.records) == 1


async def test_the_token_header_check_comes_first() -> None:
    upstream = Upstream()
    async with (
        serve_app(upstream.answer) as base,
        proxy_to(base, api_key=HELD_KEY, client_token=TOKEN) as proxied,
    ):
        status, _ = await send(
            "GET", proxied.proxy.url + "/v1/files", {"Host": "rebind.attacker.example"}
        )
        allowed, _ = await send("GET", proxied.proxy.url + "/v1/models", {TOKEN_HEADER: TOKEN})
    assert (status, allowed) == (401, 200)
