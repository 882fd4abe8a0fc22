"""`lockgate.cassette.recorder`: exchanges written as cassettes (read back through the format),
named in order without overwriting, written atomically, every secret redacted in every form
across read boundaries (a property test), and the recording transport's verdicts."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate.cassette.format import CassetteError, Verdict, load
from lockgate.cassette.recorder import (
    CassetteRecorder,
    RecordingTransport,
    SecretScrubber,
    public_base_url,
)
from lockgate.client import StreamingModelClient
from lockgate.credentials import REDACTED, _forms
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.lab.replay import ReplayTransport
from lockgate.providers.responses.codec import ResponsesCodec
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.scripted.script import Turn

from ..helpers import EDIT, HISTORY, edit_turn, text_turn

KEY = "sk-test-SECRET-1234"
EXTRA = "db/pa\"ss'wörd"  # a `--redact-env` value: a slash, both quotes, non-ASCII
NAME = re.compile(r"^(\d{4})-(\w+)-(\d{8}T\d{6})\.cassette\.jsonl$")


def ticking() -> Callable[[], float]:
    """A clock that advances 0.25 s per reading."""
    now = [100.0]

    def clock() -> float:
        now[0] += 0.25
        return now[0]

    return clock


def cassettes(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(".cassette.jsonl"))


def test_an_exchange_round_trips_through_the_format(tmp_path: Path) -> None:
    recorder = CassetteRecorder(tmp_path)
    exchange = recorder.exchange(
        "chat", "http://127.0.0.1:9/v1", "POST", "/v1/chat/completions?x=1", {"model": "m"},
        clock=ticking(),
    )  # fmt: skip
    exchange.head(200, [("Content-Type", "text/event-stream"), ("x-request-id", "req_1")])
    exchange.read(b'data: {"a": "\xc3')  # a read that ends inside a character
    exchange.read(b'\xa9"}\n\n')
    exchange.end("reset")
    exchange.decide(Verdict("refused", "transport", 1))
    path = exchange.finish()
    assert path is not None
    assert exchange.finish() is None
    cassette = load(path)
    assert (cassette.protocol, cassette.base_url, cassette.method, cassette.path) == (
        "chat", "http://127.0.0.1:9/v1", "POST", "/v1/chat/completions",
    )  # fmt: skip
    assert (cassette.request, cassette.status) == ({"model": "m"}, 200)
    assert cassette.headers == (("Content-Type", "text/event-stream"), ("x-request-id", "req_1"))
    assert [r.data for r in cassette.reads] == [b'data: {"a": "\xc3', b'\xa9"}\n\n']
    assert [r.at for r in cassette.reads] == [0.25, 0.5]
    assert (cassette.end, cassette.end_at) == ("reset", 0.75)
    assert cassette.verdict == Verdict("refused", "transport", 1)
    assert cassette.streamed
    assert cassette.recorded_at.endswith("Z")
    assert recorder.saved == [path]


def test_files_are_numbered_on_from_the_highest_in_the_folder(tmp_path: Path) -> None:
    existing = tmp_path / "0007-chat-20240101T000000.cassette.jsonl"
    existing.write_text("not mine")
    (tmp_path / "0099-notes.txt").write_text("not a cassette")
    recorder = CassetteRecorder(tmp_path)
    names = []
    for protocol in ("responses", "anthropic"):
        exchange = recorder.exchange(protocol, "http://h", "POST", "/p", None)
        exchange.head(200)
        path = exchange.finish()
        assert path is not None
        names.append(path.name)
    matches = [NAME.match(name) for name in names]
    assert [(m.group(1), m.group(2)) for m in matches if m] == [
        ("0008", "responses"),
        ("0009", "anthropic"),
    ]
    assert existing.read_text() == "not mine"


def test_a_failed_write_leaves_no_file_and_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = CassetteRecorder(tmp_path)
    exchange = recorder.exchange("chat", "http://h", "POST", "/p", None)
    exchange.head(200)
    exchange.read(b"data: x\n\n")

    def fail(source: str, target: object) -> None:
        raise OSError(28, "No space left on device")

    # The finished file is placed by a link (never over a file) or a rename: both fail.
    monkeypatch.setattr("lockgate.cassette.format.os.link", fail)
    monkeypatch.setattr("lockgate.cassette.format.os.replace", fail)
    assert exchange.finish() is None
    assert list(tmp_path.iterdir()) == []  # no cassette, no temporary file
    assert len(recorder.errors) == 1
    assert "No space left on device" in recorder.errors[0]
    assert "\n" not in recorder.errors[0]


def test_a_folder_that_cannot_be_written_is_a_cassette_error(tmp_path: Path) -> None:
    with pytest.raises(CassetteError, match="not an existing folder"):
        CassetteRecorder(tmp_path / "missing")
    (tmp_path / "file").write_text("")
    with pytest.raises(CassetteError, match="not an existing folder"):
        CassetteRecorder(tmp_path / "file")
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(CassetteError, match="not writable"):
            CassetteRecorder(locked)


def test_the_header_fields_lose_every_credential(tmp_path: Path) -> None:
    recorder = CassetteRecorder(tmp_path, secrets=[KEY])
    exchange = recorder.exchange(
        "responses",
        f"https://user:{KEY}@api.example:8443/v1?key={KEY}",
        "POST",
        f"/v1/responses?key={KEY}",
        {"input": [{"content": f"use {KEY} and {json.dumps(KEY)}"}], KEY: 1},
        secrets=["client-OWN-credential-42"],
    )
    exchange.head(
        200,
        [
            ("authorization", f"Bearer {KEY}"),
            ("Set-Cookie", "session=abc"),
            ("x-api-key", "client-OWN-credential-42"),
            ("x-echo", f"key={KEY}; own=client-OWN-credential-42"),
        ],
    )
    exchange.read(b"data: client-OWN-credential-42\n\n")
    path = exchange.finish()
    assert path is not None
    raw = path.read_bytes()
    assert KEY.encode() not in raw
    assert b"client-OWN-credential-42" not in raw
    cassette = load(path)
    assert cassette.base_url == "https://api.example:8443/v1"
    assert cassette.path == "/v1/responses"
    assert cassette.headers == (("x-echo", f"key={REDACTED}; own={REDACTED}"),)
    assert cassette.request == {
        "input": [{"content": f"use {REDACTED} and {json.dumps(REDACTED)}"}],
        REDACTED: 1,
    }
    assert cassette.body == f"data: {REDACTED}\n\n".encode()


def test_public_base_url_keeps_scheme_host_port_and_path() -> None:
    assert public_base_url("http://[::1]:8080/v1/?a=b#f") == "http://[::1]:8080/v1/"
    assert public_base_url("https://u:p@h.example") == "https://h.example"


# --- redaction across read boundaries, in every form (property) ----------------------------


def _json_forms(secret: str) -> list[str]:
    """The secret inside a JSON string, encoded the ways a server may: the encoder's own,
    every character as `\\u00xx`/`\\uXXXX` (upper-case hex too), and `/` as `\\/`."""
    every = "".join(f"\\u{ord(c):04x}" for c in secret)
    return [
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        every,
        every.upper().replace("\\U", "\\u"),
        json.dumps(secret)[1:-1].replace("/", "\\/"),
    ]


def _all_forms(secret: str) -> set[bytes]:
    forms = {*_forms(secret), *_json_forms(secret)}
    forms.add(repr(secret)[1:-1])
    forms.add(ascii(secret)[1:-1])
    return {form.encode("utf-8") for form in forms}


# Filler shares no character with a secret, its escapes or the replacement: what a secret
# leaves behind is exactly the replacement, and the rest passes unchanged.
FILLER = st.lists(
    st.sampled_from([b"<", b">", b".", b",", b";", b"!", b"|", b"~", b" ", b"\n", b"\xff",
                     b"\x80", b"\xc3", b"\xe2\x82\xac", b"{", b"}", b":"]),
    min_size=1, max_size=6,
).map(b"".join)  # fmt: skip
SECRET_ALPHABET = "abcXYZ0189/-_'\"é\\\n"
EXTRAS = st.text(SECRET_ALPHABET, min_size=4, max_size=12).filter(lambda s: s not in REDACTED)


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, list[bytes], bytes]:
    """(an extra secret, the body split into reads, the body as it must be recorded)."""
    extra = draw(EXTRAS)
    forms = sorted(_all_forms(KEY) | _all_forms(extra))
    pieces = [draw(FILLER)]
    expected = [pieces[0]]
    for _ in range(draw(st.integers(1, 4))):
        pieces.append(draw(st.sampled_from(forms)))
        expected.append(REDACTED.encode())
        filler = draw(FILLER)
        pieces.append(filler)
        expected.append(filler)
    body = b"".join(pieces)
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(body) - 1)), max_size=8))))
    bounds = [0, *cuts, len(body)]
    reads = [body[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]
    return extra, [r for r in reads if r], b"".join(expected)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=bodies())
def test_no_cassette_byte_holds_a_secret_whatever_the_reads(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[str, list[bytes], bytes]
) -> None:
    extra, reads, expected = case
    folder = tmp_path_factory.mktemp("rec")
    recorder = CassetteRecorder(folder, secrets=[KEY, extra])
    exchange = recorder.exchange("chat", "http://127.0.0.1:1", "POST", "/v1/chat/completions", {})
    exchange.head(200, [("content-type", "text/event-stream")])
    for read in reads:
        exchange.read(read)
    path = exchange.finish()
    assert path is not None
    raw = path.read_bytes()
    cassette = load(path)
    assert cassette.body == expected  # every other byte kept, in order
    assert len(cassette.reads) <= len(reads)
    for secret in (KEY, extra):
        for form in _all_forms(secret):
            assert form not in raw, form
            assert form not in cassette.body, form


def test_split_keeps_the_boundaries_outside_secrets() -> None:
    scrub = SecretScrubber([KEY])
    assert scrub.split([b"a", b"sk-test-", b"SECRET-1234b", b"c"]) == [
        b"a",
        REDACTED.encode(),
        b"b",
        b"c",
    ]
    assert scrub.split([]) == []


def test_a_secret_inside_the_replacement_is_removed_not_looped() -> None:
    scrub = SecretScrubber(["redact"])
    out = scrub.data(b"x redact y")
    assert b"redact" not in out
    assert out.startswith(b"x ")
    assert out.endswith(b" y")


# --- the recording transport -----------------------------------------------------------------


async def recorded_complete(
    tmp_path: Path, turns: list[Turn]
) -> tuple[list[Path], BaseException | None]:
    recorder = CassetteRecorder(tmp_path, secrets=[KEY])
    transport = RecordingTransport(
        ReplayTransport(turns), recorder, protocol="responses", base_url="http://127.0.0.1:1/v1"
    )
    client = StreamingModelClient(ResponsesCodec("m"), transport, observer=transport.observe)
    failure: BaseException | None = None
    try:
        await client.complete(HISTORY, [])
    except ResponseFailure as exc:
        failure = exc
    finally:
        await client.aclose()
    return cassettes(tmp_path), failure


async def test_an_accepted_stream_is_recorded_with_its_calls(tmp_path: Path) -> None:
    from lockgate.fixture import EDIT as EDIT_TOOL

    recorder = CassetteRecorder(tmp_path, secrets=[KEY])
    transport = RecordingTransport(
        ReplayTransport([edit_turn()]), recorder, protocol="responses", base_url="http://h/v1"
    )
    client = StreamingModelClient(ResponsesCodec("m"), transport, observer=transport.observe)
    message = await client.complete(HISTORY, [EDIT_TOOL])
    await client.aclose()
    [path] = cassettes(tmp_path)
    cassette = load(path)
    assert cassette.verdict == Verdict("accepted", None, 1)
    assert (cassette.status, cassette.header("content-type")) == (200, "text/event-stream")
    assert (cassette.base_url, cassette.path) == ("http://h/v1", "/responses")
    assert cassette.request["model"] == "m"
    assert message.tool_calls[0].arguments == EDIT
    assert b"response.completed" in cassette.body
    assert cassette.end == "clean"


async def test_a_refused_stream_and_a_failed_opening_carry_the_refusal(tmp_path: Path) -> None:
    cut = ResponseBuilder("resp_cut").created().text("msg", "half").turn()
    (tmp_path / "cut").mkdir()
    [path], failure = await recorded_complete(tmp_path / "cut", [cut])
    assert isinstance(failure, ResponseFailure)
    assert failure.kind == FailureKind.STREAM_ENDED
    assert load(path).verdict == Verdict("refused", "stream_ended", 0)

    (tmp_path / "open").mkdir()
    denied = Turn(status=401, body={"error": {"message": "bad key", "type": "auth"}})
    [path], failure = await recorded_complete(tmp_path / "open", [denied, text_turn()])
    assert failure is not None
    cassette = load(path)
    assert (cassette.status, cassette.reads) == (401, ())
    assert cassette.verdict is not None
    assert cassette.verdict.outcome == "refused"
