"""Cassettes and import sources written to hurt (issue 22, M8, M9, L6, L7, L8): text that
line-splitting readers split, compression bombs, header values that would inject a header,
files that are not regular files, and an import over cassettes already there. Each is one
clear line and a defined exit code (2), or a round trip that keeps every byte."""

from __future__ import annotations

import base64
import datetime
import errno
import gzip
import json
import os
import socket
import subprocess
import sys
import tracemalloc
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.cassette import importers
from lockgate.cassette.faults import playback
from lockgate.cassette.format import Cassette, CassetteError, Read, dumps, load, loads, save
from lockgate.cassette.importers import import_file, import_sources
from lockgate.cassette.recorder import CassetteRecorder

from ..helpers import CLI, finish, usage_error_line
from .recorded import recorded

LOCKGATE = [sys.executable, "-m", "lockgate"]
# Where str.splitlines (and readers built on it) split a line, besides "\n" and "\r".
SPLITTING = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
HANG_GUARD_SECONDS = 30.0  # a guard against a hang, never an assertion on speed

CHAT_SSE = (
    'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":'
    '{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n'
    "data: [DONE]\n\n"
)


def _lockgate(*args: str) -> tuple[int, str, str]:
    """`python -m lockgate ARGS` in a child process, guarded against a hang."""
    process = subprocess.Popen(
        [*LOCKGATE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    return finish(process, timeout=HANG_GUARD_SECONDS)


def _one_error_line(code: int, out: str, err: str) -> str:
    assert code == 2, (code, out, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _vcr(
    body_yaml: str,
    *,
    encoding: str | None = None,
    header_yaml: str = "",
) -> str:
    """A vcrpy cassette with one chat interaction; `body_yaml` is the body's YAML value."""
    coding = f"      Content-Encoding:\n      - {encoding}\n" if encoding else ""
    request = json.dumps(json.dumps({"model": "m", "stream": True}))
    return (
        "interactions:\n"
        "- request:\n"
        f"    body: {request}\n"
        "    method: POST\n"
        "    uri: https://api.openai.com/v1/chat/completions\n"
        "  response:\n"
        f"    body:\n      string: {body_yaml}\n"
        "    headers:\n"
        "      Content-Type:\n      - text/event-stream\n"
        f"{coding}{header_yaml}"
        "    status:\n      code: 200\n      message: OK\n"
        "version: 1\n"
    )


def _binary(data: bytes) -> str:
    return "!!binary |\n        " + base64.b64encode(data).decode("ascii")


# --- M8: text that line-splitting readers split ---------------------------------------------


def _with_text(text: str, request: object = None) -> Cassette:
    base = recorded(source="")
    body = f'data: {{"id":"c1","choices":[{{"delta":{{"content":{json.dumps(text)}}}}}]}}\n\n'
    return replace(
        base,
        reads=(Read(0.0, body.encode()), Read(0.5, text.encode())),
        request=base.request if request is None else request,
    )


@pytest.mark.parametrize("character", ["\u2028", "\u2029", "\x85"])
def test_a_session_holding_a_line_separator_reads_back(tmp_path: Path, character: str) -> None:
    cassette = _with_text(f"one{character}two", {"messages": [f"a{character}b"]})
    path = tmp_path / "x.cassette.jsonl"
    save(cassette, path)
    assert load(path) == cassette
    assert loads(dumps(cassette)) == cassette


def test_every_written_line_is_one_line_for_every_reader() -> None:
    text = dumps(_with_text(SPLITTING + "\r\n", {"m": SPLITTING}))
    assert not any(character in text for character in SPLITTING + "\r")
    assert text.splitlines() == text.split("\n")[:-1]


def test_a_file_written_with_raw_separators_still_reads() -> None:
    """Cassettes written before this fix hold the characters raw in JSON strings."""
    cassette = _with_text("a\u2028b\u2029c\x85d")
    raw = json.dumps  # ensure_ascii=False: what the writer used to do
    lines = [line for line in dumps(cassette).splitlines() if line]
    records = [json.loads(line) for line in lines]
    old = "\n".join(raw(record, ensure_ascii=False) for record in records) + "\n"
    assert "\u2028" in old
    assert loads(old) == cassette


def test_a_request_holding_a_lone_surrogate_is_written_and_read_back(tmp_path: Path) -> None:
    cassette = _with_text("x", {"messages": ["\ud800 alone"]})
    path = tmp_path / "x.cassette.jsonl"
    save(cassette, path)
    assert load(path) == cassette


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=4),
    request_text=st.text(max_size=40),
)
def test_any_text_round_trips_and_every_line_splits_alike(
    texts: list[str], request_text: str
) -> None:
    reads = tuple(
        Read(float(index), data)
        for index, text in enumerate(texts)
        if (data := text.encode("utf-8", "surrogatepass"))
    )
    cassette = replace(recorded(source=""), reads=reads, request={"text": request_text})
    text = dumps(cassette)
    assert text.splitlines() == text.split("\n")[:-1]
    assert loads(text) == cassette


# --- M9: decoding under the size bound -----------------------------------------------------


@pytest.fixture
def small_bound(monkeypatch: pytest.MonkeyPatch) -> int:
    """The importer's bound on decoded bodies, made 1 MiB (under its old name too, so that
    the test runs against the code before the fix)."""
    bound = 1 << 20
    monkeypatch.setattr(importers, "MAX_IMPORT_BYTES", bound, raising=False)
    monkeypatch.setattr(importers, "MAX_CASSETTE_BYTES", bound, raising=False)
    return bound


def _peak_while(action: Callable[[], None]) -> int:
    """The peak of Python's traced memory while `action` runs (bytes)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        action()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


BOMB_BYTES = 48 << 20  # what the bomb decodes to: far past the 1 MiB bound


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "gzip, gzip"])
def test_a_compression_bomb_is_refused_without_decoding_it_whole(
    tmp_path: Path, small_bound: int, encoding: str
) -> None:
    data = b"data: " + b"x" * BOMB_BYTES + b"\n\n"
    if encoding == "deflate":
        packed = zlib.compress(data, 9)
    else:
        packed = gzip.compress(data, 9)
        if encoding == "gzip, gzip":
            packed = gzip.compress(packed, 9)
    source = tmp_path / "bomb.yaml"
    source.write_text(_vcr(_binary(packed), encoding=encoding), encoding="utf-8")

    def attempt() -> None:
        with pytest.raises(CassetteError, match=r"bomb\.yaml#0: .*past 1048576 bytes"):
            import_file(source)

    peak = _peak_while(attempt)
    assert peak < 8 * small_bound, peak  # never the whole 48 MiB


def test_a_body_just_under_the_bound_is_decoded(tmp_path: Path, small_bound: int) -> None:
    data = CHAT_SSE.encode() * ((small_bound - 4096) // len(CHAT_SSE))
    source = tmp_path / "big.yaml"
    source.write_text(_vcr(_binary(gzip.compress(data)), encoding="gzip"), encoding="utf-8")
    found = import_file(source)
    assert found.imported[0].cassette.body == data


def test_concatenated_gzip_members_are_one_body(tmp_path: Path) -> None:
    packed = gzip.compress(CHAT_SSE[:40].encode()) + gzip.compress(CHAT_SSE[40:].encode())
    source = tmp_path / "members.yaml"
    source.write_text(_vcr(_binary(packed), encoding="gzip"), encoding="utf-8")
    assert import_file(source).imported[0].cassette.body == CHAT_SSE.encode()


@pytest.mark.parametrize(
    ("packed", "reason"),
    [
        (gzip.compress(CHAT_SSE.encode())[:-9], "not gzip"),  # cut short
        (gzip.compress(CHAT_SSE.encode()) + b"junk", "not gzip"),  # trailing garbage
    ],
    ids=["truncated", "trailing-garbage"],
)
def test_a_broken_gzip_body_is_one_line(tmp_path: Path, packed: bytes, reason: str) -> None:
    source = tmp_path / "broken.yaml"
    source.write_text(_vcr(_binary(packed), encoding="gzip"), encoding="utf-8")
    with pytest.raises(CassetteError, match=reason):
        import_file(source)


def test_the_bound_holds_across_every_source_of_one_import(
    tmp_path: Path, small_bound: int
) -> None:
    """Each body is under the bound, together they are not: an import is bounded in memory,
    not only per body."""
    data = b"data: " + b"y" * (small_bound // 3) + b"\n\n"  # two fit, three do not
    for name in ("a.yaml", "b.yaml", "c.yaml"):
        (tmp_path / name).write_text(
            _vcr(_binary(gzip.compress(data)), encoding="gzip"), encoding="utf-8"
        )
    with pytest.raises(CassetteError, match=r"c\.yaml#0: .*past 1048576 bytes"):
        import_sources([tmp_path])


def test_the_command_refuses_a_bomb_in_one_line(tmp_path: Path, cli: CLI, small_bound: int) -> None:
    data = b"data: " + b"x" * (4 * small_bound) + b"\n\n"
    source = tmp_path / "bomb.yaml"
    source.write_text(_vcr(_binary(gzip.compress(data)), encoding="gzip"), encoding="utf-8")
    target = tmp_path / "out"
    line = usage_error_line(cli("cassette", "import", str(source), "--to", str(target)))
    assert "bomb.yaml#0" in line, line
    assert "1048576 bytes" in line, line
    assert not target.exists() or not list(target.iterdir())


# --- L6: header values and names that would inject ----------------------------------------

BAD_HEADERS = [
    ("x-evil", "a\r\nset-cookie: stolen=1"),
    ("x-evil", "a\nb"),
    ("x-evil", "a\rb"),
    ("x-evil", "a\x00b"),
    ("x-evil", "a\x7fb"),
    ("x-evil\r\nset-cookie", "stolen=1"),
    ("x evil", "v"),
    ("x-evil:", "v"),
    ("", "v"),
    ("x-\u00e9vil", "v"),
]
BAD_HEADER_IDS = [
    "value-crlf",
    "value-lf",
    "value-cr",
    "value-nul",
    "value-del",
    "name-crlf",
    "name-space",
    "name-colon",
    "name-empty",
    "name-not-ascii",
]


def _with_header(name: str, value: str) -> Cassette:
    base = recorded(source="")
    return replace(base, headers=(*base.headers, (name, value)))


def _raw_cassette_text(name: str, value: str) -> str:
    """The cassette's text with the header written in, whatever the writer thinks of it."""
    lines = dumps(recorded(source="")).split("\n")
    header = json.loads(lines[0])
    header["headers"].append([name, value])
    lines[0] = json.dumps(header)
    return "\n".join(lines)


@pytest.mark.parametrize(("name", "value"), BAD_HEADERS, ids=BAD_HEADER_IDS)
def test_a_header_that_would_inject_is_refused_at_load(name: str, value: str) -> None:
    with pytest.raises(CassetteError, match=r"^evil\.cassette\.jsonl:1: .*header") as caught:
        loads(_raw_cassette_text(name, value), "evil.cassette.jsonl")
    assert "\n" not in str(caught.value)
    assert "\r" not in str(caught.value)


@pytest.mark.parametrize(("name", "value"), BAD_HEADERS, ids=BAD_HEADER_IDS)
def test_a_header_that_would_inject_is_never_written(tmp_path: Path, name: str, value: str) -> None:
    path = tmp_path / "x.cassette.jsonl"
    with pytest.raises(CassetteError, match="header"):
        save(_with_header(name, value), path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("name", "value"), BAD_HEADERS[:2], ids=BAD_HEADER_IDS[:2])
def test_a_header_that_would_inject_is_never_played(name: str, value: str) -> None:
    with pytest.raises(ValueError, match="header"):
        playback(_with_header(name, value))


def test_header_values_with_tabs_and_other_text_are_kept(tmp_path: Path) -> None:
    cassette = _with_header("x-note", "a\tb caf\u00e9 \u2028 \x85 end")
    path = tmp_path / "x.cassette.jsonl"
    save(cassette, path)
    assert load(path) == cassette


def test_serve_refuses_an_injecting_cassette_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "evil.cassette.jsonl"
    path.write_text(_raw_cassette_text("x-evil", "a\r\nset-cookie: stolen=1"), encoding="utf-8")
    line = _one_error_line(*_lockgate("serve", "--cassette", str(path)))
    assert "evil.cassette.jsonl:1" in line, line
    assert "header" in line, line


def test_import_refuses_a_source_whose_header_would_inject(tmp_path: Path, cli: CLI) -> None:
    source = tmp_path / "evil.yaml"
    header = '      X-Evil:\n      - "a\\r\\nset-cookie: stolen=1"\n'
    source.write_text(_vcr(_binary(CHAT_SSE.encode()), header_yaml=header), encoding="utf-8")
    target = tmp_path / "out"
    line = usage_error_line(cli("cassette", "import", str(source), "--to", str(target)))
    assert "evil.yaml#0" in line, line
    assert "header" in line, line
    assert not target.exists() or not list(target.iterdir())


# --- L7: files that are not regular files -------------------------------------------------


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.cassette.jsonl"
    os.mkfifo(path)
    return path


def test_serve_refuses_a_fifo_without_blocking(fifo: Path) -> None:
    line = _one_error_line(*_lockgate("serve", "--cassette", str(fifo)))
    assert str(fifo) in line, line
    assert "not a regular file" in line, line


def test_serve_refuses_a_fifo_in_a_folder_without_blocking(fifo: Path) -> None:
    save(recorded(source=""), fifo.parent / "a.cassette.jsonl")
    line = _one_error_line(*_lockgate("serve", "--cassette", str(fifo.parent)))
    assert str(fifo) in line, line
    assert "not a regular file" in line, line


def test_lab_refuses_a_fifo_without_blocking(fifo: Path) -> None:
    line = _one_error_line(*_lockgate("lab", "--cassettes", str(fifo)))
    assert str(fifo) in line, line
    assert "not a regular file" in line, line
    line = _one_error_line(*_lockgate("lab", "--cassettes", str(fifo.parent)))
    assert str(fifo) in line, line
    assert "not a regular file" in line, line


@pytest.mark.parametrize("given", ["file", "folder"])
def test_import_refuses_a_fifo_without_blocking(tmp_path: Path, given: str) -> None:
    folder = tmp_path / "sources"
    folder.mkdir()
    pipe = folder / "pipe.yaml"
    os.mkfifo(pipe)
    (folder / "good.yaml").write_text(_vcr(_binary(CHAT_SSE.encode())), encoding="utf-8")
    source = pipe if given == "file" else folder
    target = tmp_path / "out"
    line = _one_error_line(*_lockgate("cassette", "import", str(source), "--to", str(target)))
    assert str(pipe) in line, line
    assert "not a regular file" in line, line
    assert not target.exists()


def test_a_folder_where_a_source_file_is_expected_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "sources"
    (folder / "looks-like.json").mkdir(parents=True)
    with pytest.raises(CassetteError, match=r"looks-like\.json: .*not a regular file"):
        import_sources([folder])


@pytest.mark.parametrize("kind", ["socket", "device", "folder"])
def test_other_non_regular_files_are_refused(tmp_path: Path, kind: str) -> None:
    if kind == "socket":
        path = tmp_path / "s.cassette.jsonl"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
    elif kind == "device":
        path = Path(os.devnull)
    else:
        path = tmp_path / "d.cassette.jsonl"
        path.mkdir()
    try:
        with pytest.raises(CassetteError, match="not a regular file"):
            load(path)
    finally:
        if kind == "socket":
            listener.close()


# --- L8: an import never overwrites -------------------------------------------------------


def test_an_import_never_overwrites_a_cassette(tmp_path: Path, cli: CLI) -> None:
    source = tmp_path / "one.yaml"
    source.write_text(_vcr(_binary(CHAT_SSE.encode())), encoding="utf-8")
    target = tmp_path / "out"
    first = cli("cassette", "import", str(source), "--to", str(target))
    assert first.code == 0, first.output
    written = target / "one-0.cassette.jsonl"
    before = written.read_bytes()
    inode = written.stat().st_ino
    source.write_text(_vcr(_binary(b"data: [DONE]\n\n")), encoding="utf-8")
    line = usage_error_line(cli("cassette", "import", str(source), "--to", str(target)))
    assert str(written) in line, line
    assert "already exists" in line, line
    assert written.read_bytes() == before
    assert written.stat().st_ino == inode
    assert sorted(p.name for p in target.iterdir()) == ["one-0.cassette.jsonl"]


def test_an_import_writes_nothing_when_any_name_is_taken(tmp_path: Path, cli: CLI) -> None:
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text(_vcr(_binary(CHAT_SSE.encode())), encoding="utf-8")
    target = tmp_path / "out"
    target.mkdir()
    (target / "b-0.cassette.jsonl").write_text("mine\n", encoding="utf-8")
    result = cli(
        "cassette", "import", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"),
        "--to", str(target),
    )  # fmt: skip
    line = usage_error_line(result)
    assert "b-0.cassette.jsonl" in line, line
    assert sorted(p.name for p in target.iterdir()) == ["b-0.cassette.jsonl"]
    assert (target / "b-0.cassette.jsonl").read_text(encoding="utf-8") == "mine\n"


def test_save_without_replacing_leaves_an_existing_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "x.cassette.jsonl"
    path.write_text("mine\n", encoding="utf-8")
    with pytest.raises(CassetteError, match="already exists"):
        save(recorded(source=""), path, replace=False)
    assert path.read_text(encoding="utf-8") == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.cassette.jsonl"]
    save(recorded(source=""), tmp_path / "y.cassette.jsonl", replace=False)
    assert load(tmp_path / "y.cassette.jsonl") == recorded(source="")


def test_without_hard_links_save_still_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(source: object, target: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr("lockgate.cassette.format.os.link", no_links)
    path = tmp_path / "x.cassette.jsonl"
    save(recorded(source=""), path, replace=False)
    assert load(path) == recorded(source="")
    with pytest.raises(CassetteError, match="already exists"):
        save(recorded("anthropic", source=""), path, replace=False)
    assert load(path) == recorded(source="")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.cassette.jsonl"]


# --- the recorder: what it cannot replay it does not keep, and it never overwrites ---------


def _record(recorder: CassetteRecorder, headers: list[tuple[str, str]]) -> Path | None:
    exchange = recorder.exchange("chat", "http://127.0.0.1:9/v1", "POST", "/v1/chat", {})
    exchange.head(200, [("content-type", "text/event-stream"), *headers])
    exchange.read(CHAT_SSE.encode())
    return exchange.finish()


@pytest.mark.parametrize(
    "header",
    [("x-raw", "caf\udce9"), ("x-evil", "a\r\nset-cookie: stolen=1"), ("x evil", "v")],
    ids=["bytes-not-text", "value-crlf", "name-space"],
)
def test_the_recorder_drops_a_header_it_could_not_replay(
    tmp_path: Path, header: tuple[str, str]
) -> None:
    recorder = CassetteRecorder(tmp_path)
    path = _record(recorder, [header, ("x-request-id", "req_1")])
    assert recorder.errors == []
    assert path is not None
    assert load(path).headers == (("content-type", "text/event-stream"), ("x-request-id", "req_1"))


def test_the_recorder_never_overwrites_a_name_taken_after_its_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = CassetteRecorder(tmp_path)
    moment = datetime.datetime(2026, 1, 5, 16, 4, 31, tzinfo=datetime.UTC)
    first = recorder.write(recorded(source=""), moment)
    assert first.name == "0001-chat-20260105T160431.cassette.jsonl"
    theirs = tmp_path / "0002-chat-20260105T160431.cassette.jsonl"
    theirs.write_text("another recorder's\n", encoding="utf-8")
    # The look finds nothing (another recorder takes the name right after it).
    monkeypatch.setattr(Path, "exists", lambda self: False)
    second = recorder.write(recorded(sizes=(5,), source=""), moment)
    monkeypatch.undo()
    assert theirs.read_text(encoding="utf-8") == "another recorder's\n"
    assert second.name == "0003-chat-20260105T160431.cassette.jsonl"
    assert load(second) == recorded(sizes=(5,), source="")
