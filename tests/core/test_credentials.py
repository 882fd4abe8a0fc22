"""Credentials: key vetting never quotes the key; redaction, whole and streamed, agrees."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from typing import Any

import pytest
from benchmarks.hostile import RawRequest, RawServer, raw_server
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.client import StreamingModelClient
from lockgate.credentials import REDACTED, Redactor, StreamRedactor, api_key_problem
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import ResponseFailed, Retrying
from lockgate.fixture import ALL_TOOLS
from lockgate.providers.openai.transport import OpenAITransport
from lockgate.providers.responses.codec import ResponsesCodec
from lockgate.providers.responses.render import ResponseBuilder, sse_bytes
from lockgate.transport import TransportOptions

from ..helpers import HISTORY, KEY, Recorder


def _pieces_of(key: str) -> set[str]:
    """Every 3-character piece of `key`, and each character of it that is not printable ASCII
    (the offending character must not be quoted either)."""
    pieces = {key[i : i + 3] for i in range(len(key) - 2)}
    return pieces | {char for char in key if not " " <= char <= "~"}


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "empty"),
        ("Q7x", "too short to be kept out of output"),
        ("sk-Q7x9 Zp4w", "whitespace or control"),
        (" sk-Q7x9Zp4w", "whitespace or control"),
        ("sk-Q7x9Zp4w\n", "whitespace or control"),
        ("sk-Q7x9\r\nZp4w", "whitespace or control"),
        ("sk-Q7x9\tZp4w", "whitespace or control"),
        ("sk-Q7x9\x00Zp4w", "whitespace or control"),
        ("sk-Q7x9\x1bZp4w", "whitespace or control"),
        ("sk-Q7x9\u200bZp4w", "whitespace or control"),  # zero-width space (Cf)
        ("sk-Q7x9\u202eZp4w", "whitespace or control"),  # bidi override (Cf)
        ("sk-Q7x9\u2028Zp4w", "whitespace or control"),  # line separator (Zl)
        ("sk-Q7x9\u2029Zp4w", "whitespace or control"),  # paragraph separator (Zp)
        ("sk-Q7x9\u00a0Zp4w", "whitespace or control"),  # no-break space (Zs)
        ("sk-Q7x9\u0085Zp4w", "whitespace or control"),  # next line (Cc)
        ("sk-Q7x9éZp4w", "non-ASCII"),
        ("sk-ключ-Zp4w", "non-ASCII"),
    ],
)
def test_api_key_problem_names_the_rule_and_never_the_key(key: str, reason: str) -> None:
    problem = api_key_problem(key)
    assert problem is not None
    assert reason in problem
    assert "\n" not in problem
    if key:
        assert key not in problem
    for piece in _pieces_of(key):
        assert piece not in problem, piece


@pytest.mark.parametrize("key", ["sk-proj-Q7x9Zp4w-_.=+/", "abcd", "sk-" + "x" * 200])
def test_api_key_problem_accepts_printable_ascii_keys(key: str) -> None:
    assert api_key_problem(key) is None


def test_every_occurrence_is_redacted_longest_secret_first() -> None:
    redact = Redactor(["abc", "abcdef", ""])
    assert redact("xabcdefx abc abcabc") == f"x{REDACTED}x {REDACTED} {REDACTED}{REDACTED}"


def test_short_secrets_are_redacted_and_empty_ones_ignored() -> None:
    assert Redactor(["k"])("kayak") == f"{REDACTED}aya{REDACTED}"
    assert Redactor([""])("anything") == "anything"
    assert Redactor()("anything") == "anything"


def test_json_escaped_form_is_redacted_in_encoded_text() -> None:
    secret = 'sk-"quoted"\\back'
    for encoded in (
        json.dumps({"message": f"key {secret} echoed"}),
        json.dumps({"message": f"key {secret} é"}, ensure_ascii=False),
    ):
        redacted = Redactor([secret])(encoded)
        assert json.dumps(secret)[1:-1] not in redacted
        assert json.loads(redacted) == {
            "message": json.loads(encoded)["message"].replace(secret, REDACTED)
        }


def test_non_ascii_secret_is_redacted_in_ascii_escaped_json() -> None:
    secret = "sk-ключ"
    redacted = Redactor([secret])(json.dumps({"k": secret}))
    assert json.loads(redacted) == {"k": REDACTED}


def test_redact_value_reaches_every_string_keys_too() -> None:
    redact = Redactor(["s3cr"])
    value = {"s3cr": ["a s3cr", ("s3cr", 3, None)], "n": {"deep": "xs3crx"}, "f": 1.5}
    assert redact.redact_value(value) == {
        REDACTED: [f"a {REDACTED}", (REDACTED, 3, None)],
        "n": {"deep": f"x{REDACTED}x"},
        "f": 1.5,
    }


def test_stream_holds_back_only_a_possible_secret_start() -> None:
    stream = Redactor(["sk-secret"]).stream()
    assert isinstance(stream, StreamRedactor)
    assert stream.feed("hello sk-") == "hello "
    assert stream.feed("sec") == ""
    assert stream.feed("ret! s") == f"{REDACTED}! "
    assert stream.feed("o") == "so"
    assert stream.feed("sk") == ""
    assert stream.flush() == "sk"
    assert stream.flush() == ""


def test_stream_without_secrets_releases_at_once() -> None:
    stream = Redactor().stream()
    assert stream.feed("sk-") == "sk-"
    assert stream.flush() == ""


def test_stream_waits_for_a_longer_secret_before_choosing_a_shorter_one() -> None:
    stream = Redactor(["ab", "abcd"]).stream()
    assert stream.feed("xab") == "x"
    assert stream.feed("c") == ""
    assert stream.feed("dab") == REDACTED
    assert stream.flush() == REDACTED


ALPHABET = 'ab"\\-é'  # self-overlapping secrets, JSON-escaped forms, non-ASCII


@settings(max_examples=300, deadline=None)
@given(
    secrets=st.lists(st.text(ALPHABET, min_size=1, max_size=8), max_size=3),
    text=st.text(ALPHABET + "c\n", max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=8),
)
def test_streamed_redaction_equals_whole_redaction(
    secrets: list[str], text: str, cuts: list[int]
) -> None:
    redact = Redactor(secrets)
    bounds = [0, *sorted(min(cut, len(text)) for cut in cuts), len(text)]
    pieces = [text[start:end] for start, end in itertools.pairwise(bounds)]
    stream = redact.stream()
    released = [stream.feed(piece) for piece in pieces]
    assert "".join(released) + stream.flush() == redact(text)
    for part in released:
        for secret in secrets:
            assert secret not in part.replace(REDACTED, "\x00")


# --- keys the transport refuses, keys a server echoes ------------------------------------


@pytest.mark.parametrize("key", ["a\nb", "sk-abc\nsecond-line", "sk-abcdé-x", "abc"])
def test_the_transport_refuses_an_unusable_key_without_echo(key: str) -> None:
    with pytest.raises(ValueError, match="api_key") as caught:
        OpenAITransport(TransportOptions(api_key=key), "responses")
    assert key not in str(caught.value)
    for part in re.split(r"\s", key):
        if len(part) > 3:
            assert part not in str(caught.value)


def echo_authorization(server: RawServer) -> Any:
    """First request: a 503 whose message quotes the Authorization header; then a stream
    whose in-stream `error` event quotes it."""

    async def handle(
        request: RawRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        authorization = request.headers.get("authorization", "")
        if len(server.requests) == 1:
            payload = json.dumps(
                {"error": {"message": f"overloaded, {authorization}", "code": "overloaded"}}
            ).encode()
            writer.write(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(payload), payload)
            )
        else:
            events = ResponseBuilder("resp_auth").created().events
            events.append({"type": "error", "code": "bad_key", "message": f"no: {authorization}"})
            body = b"".join(sse_bytes(event) for event in events)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"connection: close\r\n\r\n" + body
            )
        await writer.drain()

    return handle


async def test_response_failure_never_carries_the_key_the_server_echoes() -> None:
    recorder = Recorder()
    with raw_server(echo_authorization) as server:
        transport = OpenAITransport(
            TransportOptions(api_key=KEY, base_url=server.base_url, trust_env=False),
            "responses",
        )
        client = StreamingModelClient(
            ResponsesCodec("m"), transport, observer=recorder, sleep=recorder.sleep
        )
        try:
            with pytest.raises(ResponseFailure) as caught:
                await client.complete(HISTORY, ALL_TOOLS)
        finally:
            await client.aclose()
    assert [r.headers["authorization"] for r in server.requests] == [f"Bearer {KEY}"] * 2
    failure = caught.value
    assert failure.kind is FailureKind.PROVIDER_ERROR
    assert KEY not in failure.message
    assert KEY not in str(failure)
    assert all(KEY not in str(arg) for arg in failure.args)
    assert "[redacted]" in failure.message
    reported = [e for e in recorder.events if isinstance(e, ResponseFailed | Retrying)]
    assert len(reported) == 2
    assert all(KEY not in repr(event) for event in reported)
