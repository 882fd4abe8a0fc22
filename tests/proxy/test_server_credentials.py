"""Whose credentials the proxy sends upstream: the client's own without a held key; the held
key in their place, never in a record, a reason or a body; the client token required, sent
in its own header, never upstream, and one that is not UTF-8 refused; a browser request may
not spend the held key. Real sockets on loopback (`own_upstream`, `scripted`)."""

from __future__ import annotations

import asyncio
import json

import pytest

from lockgate.proxy.server import TOKEN_HEADER
from lockgate.scripted.reply import Reply, Say
from lockgate.scripted.script import Turn

from .support import ends_with_refusal, request_for
from .test_server import CLIENT_KEY, HELD_KEY, PATHS, TOKEN, own_upstream, post, proxy_to, scripted


async def test_without_a_held_key_the_clients_credentials_go_upstream() -> None:
    async with own_upstream() as (base, seen), proxy_to(base) as proxied:
        await post(
            proxied.proxy.url + PATHS["chat"],
            request_for("chat"),
            {"authorization": f"Bearer {CLIENT_KEY}", "connection": "close"},
        )
    [request] = seen
    assert request.headers["Authorization"] == f"Bearer {CLIENT_KEY}"
    assert "Connection" not in request.headers or request.headers["Connection"] != "close"


@pytest.mark.parametrize(
    ("path", "extra", "expected"),
    [
        (PATHS["chat"], {}, ("Authorization", f"Bearer {HELD_KEY}")),
        (PATHS["responses"], {}, ("Authorization", f"Bearer {HELD_KEY}")),
        (PATHS["anthropic"], {"anthropic-version": "2023-06-01"}, ("x-api-key", HELD_KEY)),
        ("/v1/messages/count_tokens", {"anthropic-version": "2023-06-01"}, ("x-api-key", HELD_KEY)),
        ("/v1/responses/input_tokens", {}, ("Authorization", f"Bearer {HELD_KEY}")),
    ],
)
async def test_a_held_key_replaces_the_clients_credentials(
    path: str, extra: dict[str, str], expected: tuple[str, str]
) -> None:
    headers = {"authorization": f"Bearer {CLIENT_KEY}", "x-api-key": CLIENT_KEY, **extra}
    async with own_upstream() as (base, seen), proxy_to(base, api_key=HELD_KEY) as proxied:
        await post(proxied.proxy.url + path, request_for("chat"), headers)
    [request] = seen
    name, value = expected
    assert request.headers[name] == value
    sent = json.dumps(request.headers)
    assert CLIENT_KEY not in sent
    assert sent.count(HELD_KEY) == 1
    assert request.headers.get("anthropic-version") == extra.get("anthropic-version")
    assert HELD_KEY not in repr(proxied.records)


async def test_the_client_token_is_required_and_never_sent_upstream() -> None:
    async with (
        own_upstream() as (base, seen),
        proxy_to(base, api_key=HELD_KEY, client_token=TOKEN) as proxied,
    ):
        url = proxied.proxy.url + PATHS["chat"]
        missing = await post(url, request_for("chat"))
        wrong = await post(url, request_for("chat"), {"authorization": "Bearer sk-wrong-token"})
        as_header = await post(url, request_for("chat"), {TOKEN_HEADER: TOKEN})
        as_key = await post(url, request_for("chat"), {"authorization": f"Bearer {TOKEN}"})
        as_x_api_key = await post(url, request_for("chat"), {"x-api-key": TOKEN})
    assert [missing[0], wrong[0]] == [401, 401]
    assert "client token" in json.loads(missing[2])["error"]["message"]
    assert [as_header[0], as_key[0], as_x_api_key[0]] == [400, 400, 400]  # the upstream's
    assert len(seen) == 3
    for request in seen:
        assert TOKEN not in json.dumps(request.headers)
        assert request.headers["Authorization"] == f"Bearer {HELD_KEY}"
    assert [r.outcome for r in proxied.records][:2] == ["rejected", "rejected"]
    assert TOKEN not in repr(proxied.records)


async def test_without_a_held_key_the_token_goes_only_in_its_own_header() -> None:
    async with own_upstream() as (base, seen), proxy_to(base, client_token=TOKEN) as proxied:
        url = proxied.proxy.url + PATHS["chat"]
        as_key = await post(url, request_for("chat"), {"authorization": f"Bearer {TOKEN}"})
        ok = await post(
            url,
            request_for("chat"),
            {TOKEN_HEADER: TOKEN, "authorization": f"Bearer {CLIENT_KEY}"},
        )
    assert (as_key[0], ok[0]) == (401, 400)
    [request] = seen
    assert request.headers["Authorization"] == f"Bearer {CLIENT_KEY}"
    assert TOKEN_HEADER not in {name.lower() for name in request.headers}


@pytest.mark.parametrize("provider", ["responses", "chat"])  # whose error events carry a message
async def test_a_reason_that_quotes_the_held_key_is_redacted(provider: str) -> None:
    reply = Reply("r1", (Say("x"),), ending="error", error_message=f"bad key {HELD_KEY}")
    async with scripted(provider, [Turn(reply=reply)], api_key=HELD_KEY) as (_, proxied):
        status, _, body = await post(proxied.proxy.url + PATHS[provider], request_for(provider))
    assert status == 200
    assert ends_with_refusal(body, provider)
    [record] = proxied.records
    assert record.reason is not None
    assert "bad key [redacted]" in record.reason
    assert HELD_KEY not in record.reason
    assert HELD_KEY.encode() not in body


async def test_a_browser_request_may_not_spend_the_held_key() -> None:
    async with (
        own_upstream() as (base, seen),
        proxy_to(base, api_key=HELD_KEY, client_token=TOKEN) as proxied,
    ):
        url = proxied.proxy.url + PATHS["chat"]
        status, _, body = await post(
            url, request_for("chat"), {TOKEN_HEADER: TOKEN, "origin": "https://evil.example"}
        )
    assert status == 403
    assert b"may not use the key" in body
    assert seen == []


async def test_a_token_that_is_not_utf8_is_refused_not_a_crash() -> None:
    async with own_upstream() as (base, seen), proxy_to(base, client_token=TOKEN) as proxied:
        host, port = proxied.proxy.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-lockgate-token: \xff\xfe\r\n"
            b"content-length: 2\r\nconnection: close\r\n\r\n{}"
        )
        await writer.drain()
        answer = await reader.read()
        writer.close()
    assert answer.startswith(b"HTTP/1.1 401")
    assert seen == []
