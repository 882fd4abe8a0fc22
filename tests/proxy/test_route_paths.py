"""How the proxy reads a request's path (issue 27): `%3A` is the `:` of a Gemini or Vertex AI
request (left escaped, such a request passed ungated on a keyless route), and a held key goes
to the paths of each protocol's API (`Gateway.keyed_paths`), not to whatever path ends like
one: Gemini's `:countTokens` gets it, OpenAI's `POST …/threads/{id}/messages` does not."""

from __future__ import annotations

import pytest
from yarl import URL

from lockgate.proxy.routes import plain_path, route, takes_held_key

from .test_server import HELD_KEY, proxy_to, serve_app
from .test_server_policy import Upstream, carries_the_key, message_of, send

GEMINI_STREAMS = [
    "/v1beta/models/gemini-2.5-pro%3AstreamGenerateContent",
    "/v1beta/models/gemini-2.5-pro%3astreamGenerateContent",
    "/v1/projects/p/locations/us/publishers/google/models/gemini-2.5-pro%3AstreamGenerateContent",
]


@pytest.mark.parametrize("path", GEMINI_STREAMS)
async def test_an_escaped_colon_in_a_gemini_path_is_gated_on_a_keyless_route(path: str) -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        url = URL(proxied.proxy.url + path, encoded=True)  # without alt=sse: gated, refused
        status, answer = await send("POST", url, None, {"contents": []})
    assert status == 400, answer
    assert "alt=sse" in message_of(answer)
    assert upstream.seen == []
    [record] = proxied.records
    assert record.protocol == "gemini"


@pytest.mark.parametrize(
    "path",
    [
        "/v1beta/models/m%3AgenerateContent",
        "/v1/projects/p/locations/l/publishers/anthropic/models/claude%3AstreamRawPredict",
        "/v1/projects/p/locations/l/endpoints/e%3agenerateContent",
    ],
)
def test_the_plain_path_decodes_an_escaped_colon(path: str) -> None:
    plain = plain_path(path)
    assert ":" in plain
    assert "%3" not in plain.lower()
    assert route("POST", plain) is not None


def test_an_escaped_colon_in_other_letter_case_is_still_refused() -> None:
    with pytest.raises(ValueError, match="other letter case"):
        plain_path("/v1beta/models/m%3AStreamGenerateContent")


KEYED = [
    ("/v1beta/models/gemini-2.5-pro:countTokens", "x-goog-api-key"),  # Gemini CLI
    ("/v1/projects/p/locations/l/publishers/google/models/gemini-2.5-pro:countTokens", None),
    ("/v1/projects/p/locations/l/publishers/anthropic/models/count-tokens:rawPredict", None),
    ("/v1/messages/count_tokens", None),
    ("/v1/responses/input_tokens", None),
    ("/v1/chat/completions", None),
]


@pytest.mark.parametrize(("path", "header"), KEYED)
async def test_each_protocols_token_counts_and_requests_get_the_held_key(
    path: str, header: str | None
) -> None:
    upstream = Upstream()
    headers = {"x-goog-api-client": "genai-js/1.0"} if header else None
    async with serve_app(upstream.answer) as base, proxy_to(base, api_key=HELD_KEY) as proxied:
        status, answer = await send("POST", proxied.proxy.url + path, headers, {"contents": []})
    assert status in (200, 502), answer  # 502: a model request's answer is judged
    [(_, sent_path, sent)] = upstream.seen
    assert sent_path == path
    if header:
        assert sent[header] == HELD_KEY
    else:
        assert carries_the_key(sent) or sent.get("x-goog-api-key") == HELD_KEY


NOT_KEYED = [
    "/v1/threads/thread_abc/messages",  # OpenAI's Assistants: ends like Anthropic's Messages
    "/openai/threads/thread_abc/messages",  # Azure's
    "/v1/assistants/asst_1/messages",
]


@pytest.mark.parametrize("path", NOT_KEYED)
async def test_a_path_that_only_ends_like_a_model_request_does_not_get_the_held_key(
    path: str,
) -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base, api_key=HELD_KEY) as proxied:
        status, answer = await send(
            "POST", proxied.proxy.url + path, None, {"role": "user", "content": "hi"}
        )
    assert status == 403, answer
    assert "--key-on-any-path" in message_of(answer)
    assert upstream.seen == []


def test_takes_held_key_follows_each_protocols_paths() -> None:
    assert takes_held_key("POST", "/v1/messages")
    assert takes_held_key("POST", "/messages")  # under an upstream URL ending in /v1
    assert takes_held_key("POST", "/openai/deployments/gpt/chat/completions")
    assert not takes_held_key("POST", "/v1/threads/t/messages")
    assert not takes_held_key("POST", "/v1beta/files/f:countTokens")
