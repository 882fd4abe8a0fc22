"""How the proxy reads a request's path (issue 27): `%3A` is the `:` of a Gemini or Vertex AI
request (left escaped, such a request passed ungated on a keyless route), and a held key goes
to the paths of each protocol's API (`Gateway.keyed_paths`), not to whatever path ends like
one: Gemini's `:countTokens` gets it, OpenAI's `POST …/threads/{id}/messages` does not."""

from __future__ import annotations

import pytest
from yarl import URL

from lockgate.proxy.routes import plain_path, route

from .test_server import proxy_to, serve_app
from .test_server_policy import Upstream, message_of, send

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
