"""`lockgate cassette import`: vcrpy / pytest-recording YAML cassettes written here (plain,
`!!binary`, gzip), a few real-streams files (`../shared/real-streams`, skipped where
absent), and the one-line errors for bad input (exit 2, nothing written)."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
from pathlib import Path

import pytest

from lockgate.cassette import format as cassette_format
from lockgate.cassette.format import CassetteError
from lockgate.cassette.importers import import_file, import_sources, protocol_of_path
from lockgate.cassette.judge import judge
from lockgate.providers.bedrock.render import frame_bytes, render
from lockgate.scripted.reply import Call, Reply, Say

from ..helpers import CLI, ROOT

CORPUS = ROOT.parent / "shared" / "real-streams"

CHAT_SSE = (
    'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":'
    '{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n'
    'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},'
    '"finish_reason":"stop"}]}\n\n'
    "data: [DONE]\n\n"
)
REQUEST = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line for line in text.splitlines())


def _vcr(body_yaml: str, *, uri: str = "https://api.openai.com/v1/chat/completions?key=s3cret",
         extra_headers: str = "", method: str = "POST") -> str:  # fmt: skip
    """A vcrpy cassette with one interaction; `body_yaml` is the `body:` value's YAML."""
    return f"""interactions:
- request:
    body: '{json.dumps(REQUEST)}'
    headers:
      Authorization:
      - Bearer sk-secret-key
      Content-Type:
      - application/json
    method: {method}
    uri: {uri}
  response:
    body:
{_indent(body_yaml, 6)}
    headers:
      Content-Type:
      - text/event-stream; charset=utf-8
      Set-Cookie:
      - session=abc
      Date:
      - Mon, 05 Jan 2026 16:04:31 GMT
{extra_headers}
    status:
      code: 200
      message: OK
version: 1
"""


def _block(text: str) -> str:
    """A literal block that keeps every byte of `text` (ending in a line break)."""
    return "string: |+\n" + _indent(text, 2) + "\n"


def _only(path: Path) -> cassette_format.Cassette:
    found = import_file(path)
    assert not found.skipped, found.skipped
    assert len(found.imported) == 1
    return found.imported[0].cassette


def test_protocols_are_inferred_from_the_path() -> None:
    assert protocol_of_path("/v1/chat/completions") == "chat"
    assert protocol_of_path("/openai/v1/responses") == "responses"
    assert protocol_of_path("/v1/messages") == "anthropic"
    assert protocol_of_path("/v1beta/models/gemini-2.5-flash:streamGenerateContent") == "gemini"
    assert protocol_of_path("/model/us.anthropic.claude-v1%3A0/converse-stream") == "bedrock"
    assert protocol_of_path("/model/m/invoke-with-response-stream") == "bedrock"
    assert protocol_of_path("/model/m/invoke-something") is None
    assert protocol_of_path("/v1/models") is None
    assert protocol_of_path("/v1/embeddings") is None


def test_a_plain_yaml_cassette(tmp_path: Path) -> None:
    source = tmp_path / "plain.yaml"
    source.write_text(_vcr(_block(CHAT_SSE)), encoding="utf-8")
    cassette = _only(source)
    assert cassette.protocol == "chat"
    assert cassette.base_url == "https://api.openai.com"
    assert cassette.path == "/v1/chat/completions"  # the query (where keys travel) is gone
    assert cassette.method == "POST"
    assert cassette.request == REQUEST
    assert cassette.status == 200
    assert cassette.body == CHAT_SSE.encode()
    assert [r.at for r in cassette.reads] == [0.0]
    names = [name.lower() for name, _ in cassette.headers]
    assert "set-cookie" not in names
    assert "content-type" in names
    assert cassette.recorded_at == "2026-01-05T16:04:31Z"
    assert cassette.verdict is None


def test_a_binary_body(tmp_path: Path) -> None:
    encoded = base64.b64encode(CHAT_SSE.encode()).decode()
    source = tmp_path / "binary.yml"
    source.write_text(_vcr(f"string: !!binary |\n  {encoded}\n"), encoding="utf-8")
    assert _only(source).body == CHAT_SSE.encode()


def test_a_vcr_bedrock_exchange_is_a_binary_event_stream_cassette(tmp_path: Path) -> None:
    """A vcrpy recording of ConverseStream (its body `!!binary`, as vcrpy writes bytes that
    are not text): the exact bytes, an event-stream cassette, judged with its call."""
    reply = Reply("r1", (Say("Fixing."), Call("call_1", "edit", {"path": "a.py"})))
    body = b"".join(frame_bytes(event) for event in render(reply).events)
    request = {
        "messages": [{"role": "user", "content": [{"text": "fix"}]}],
        "toolConfig": {"tools": [{"toolSpec": {"name": "edit", "inputSchema": {"json": {}}}}]},
    }
    source = tmp_path / "bedrock.yaml"
    source.write_text(
        f"""interactions:
- request:
    body: '{json.dumps(request)}'
    headers:
      Authorization:
      - AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260105/us-east-1/bedrock/aws4_request
    method: POST
    uri: https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-v1%3A0/converse-stream
  response:
    body:
      string: !!binary |
        {base64.b64encode(body).decode()}
    headers:
      Content-Type:
      - application/vnd.amazon.eventstream
    status:
      code: 200
      message: OK
version: 1
""",
        encoding="utf-8",
    )
    cassette = _only(source)
    assert (cassette.protocol, cassette.wire) == ("bedrock", "eventstream")
    assert cassette.body == body
    assert "AKIDEXAMPLE" not in cassette_format.dumps(cassette)
    judged = asyncio.run(judge(cassette))
    assert judged.accepted, judged.detail
    assert judged.decision is not None
    assert [name for name, _ in judged.decision.calls] == ["edit"]


def test_a_gzip_body_is_decompressed_and_its_encoding_dropped(tmp_path: Path) -> None:
    packed = base64.b64encode(gzip.compress(CHAT_SSE.encode())).decode()
    headers = "      Content-Encoding:\n      - gzip\n      Content-Length:\n      - '999'"
    source = tmp_path / "gzipped.yaml"
    source.write_text(
        _vcr(f"string: !!binary |\n  {packed}\n", extra_headers=headers), encoding="utf-8"
    )
    cassette = _only(source)
    assert cassette.body == CHAT_SSE.encode()
    names = {name.lower() for name, _ in cassette.headers}
    assert not names & {"content-encoding", "content-length"}


def test_a_gzip_header_on_a_body_that_is_not_gzip_is_an_error(tmp_path: Path) -> None:
    headers = "      Content-Encoding:\n      - gzip"
    source = tmp_path / "liar.yaml"
    source.write_text(_vcr(_block(CHAT_SSE), extra_headers=headers), encoding="utf-8")
    with pytest.raises(CassetteError, match=r"liar\.yaml#0: .*not gzip"):
        import_file(source)


def test_non_protocol_interactions_are_skipped_with_a_reason(tmp_path: Path) -> None:
    source = tmp_path / "models.yaml"
    source.write_text(_vcr(_block("{}"), uri="https://api.openai.com/v1/models", method="GET"))
    found = import_file(source)
    assert not found.imported
    assert len(found.skipped) == 1
    assert "/v1/models" in found.skipped[0].reason
    # --protocol imports a path the importer does not know, but never a GET.
    forced = import_file(source, "chat")
    assert not forced.imported
    assert "GET" in forced.skipped[0].reason


def test_protocol_forces_an_unknown_path(tmp_path: Path) -> None:
    source = tmp_path / "gateway.yaml"
    source.write_text(_vcr(_block(CHAT_SSE), uri="http://localhost:8080/llm/stream"))
    assert not import_file(source).imported
    assert _only_forced(source).protocol == "chat"


def _only_forced(path: Path) -> cassette_format.Cassette:
    found = import_file(path, "chat")
    assert len(found.imported) == 1
    return found.imported[0].cassette


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("interactions: [unclosed\n", r"bad\.yaml:\d+: not a YAML cassette"),
        ("just: a mapping\n", r"bad\.yaml: neither a vcrpy cassette"),
        ("interactions: 3\n", r"bad\.yaml: `interactions` is not a list"),
        ("interactions:\n- request: {uri: /x}\n", r"bad\.yaml#0: an interaction needs"),
        ("!!python/object:os.system {}\n", r"bad\.yaml:\d+: not a YAML cassette"),
        # A "billion laughs": aliases are refused before anything expands.
        ('a: &x ["lol", "lol"]\nb: &y [*x, *x]\nc: [*y, *y]\n', r"aliases are not read"),
    ],
)
def test_bad_yaml_is_one_line_naming_the_file(tmp_path: Path, text: str, reason: str) -> None:
    source = tmp_path / "bad.yaml"
    source.write_text(text, encoding="utf-8")
    with pytest.raises(CassetteError, match=reason) as caught:
        import_file(source)
    assert "\n" not in str(caught.value)


def test_the_command_writes_one_cassette_per_exchange(tmp_path: Path, cli: CLI) -> None:
    source = tmp_path / "two.yaml"
    one = _vcr(_block(CHAT_SSE))
    models = _vcr(_block("{}"), uri="https://api.openai.com/v1/models", method="GET")
    # Two interactions, one of them not a model request.
    both = one.replace("version: 1\n", "") + models.split("interactions:\n", 1)[1]
    source.write_text(both, encoding="utf-8")
    target = tmp_path / "out"
    result = cli("cassette", "import", str(source), "--to", str(target))
    assert result.code == 0, result.output
    assert f"wrote 1 cassette to {target}" in result.out
    assert "skipped" in result.out
    assert "two.yaml#1" in result.out
    written = sorted(p.name for p in target.iterdir())
    assert written == ["two-0.cassette.jsonl"]
    loaded = cassette_format.load(target / "two-0.cassette.jsonl")
    assert loaded.body == CHAT_SSE.encode()
    assert "sk-secret-key" not in (target / "two-0.cassette.jsonl").read_text()


def test_the_command_writes_nothing_when_any_source_is_bad(tmp_path: Path, cli: CLI) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(_vcr(_block(CHAT_SSE)), encoding="utf-8")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    target = tmp_path / "out"
    result = cli("cassette", "import", str(good), str(bad), "--to", str(target))
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1
    assert "bad.json" in lines[0]
    assert "Traceback" not in result.err
    assert not target.exists() or not list(target.iterdir())


def test_the_command_names_a_missing_source(tmp_path: Path, cli: CLI) -> None:
    result = cli("cassette", "import", str(tmp_path / "nope.yaml"), "--to", str(tmp_path))
    assert result.code == 2
    assert "nope.yaml" in result.err
    assert len(result.err.strip().splitlines()) == 1


# --- real-streams files ---------------------------------------------------------------------

needs_corpus = pytest.mark.skipif(
    not CORPUS.is_dir(),
    reason=f"no real recordings at {CORPUS} (they live beside the project in the development "
    "workspace, not in a clone)",
)
SAMPLES = (
    "chat-magentic-26.json",
    "anthropic-crewAI-1.json",
    "gemini-pydantic-ai-3.json",
    "responses-pydantic-ai-1.json",
)


@needs_corpus
@pytest.mark.parametrize("name", SAMPLES)
def test_a_real_stream_keeps_its_body_request_and_status(name: str, tmp_path: Path) -> None:
    recording = json.loads((CORPUS / name).read_text(encoding="utf-8"))
    found = import_sources([CORPUS / name])
    assert len(found.imported) == 1
    imported = found.imported[0]
    assert imported.name == name.removesuffix(".json") + ".cassette.jsonl"
    cassette = imported.cassette
    assert cassette.protocol == recording["protocol"]
    assert cassette.body == recording["body"].encode("utf-8")
    assert cassette.request == recording["request"]
    assert cassette.status == recording["status"]
    assert cassette.path.startswith("/")
    assert "?" not in cassette.path
    # Written and read back, it is the same exchange.
    cassette_format.save(cassette, tmp_path / imported.name)
    again = cassette_format.load(tmp_path / imported.name)
    assert again == cassette


@needs_corpus
def test_bedrock_recordings_import_as_binary_cassettes_judged_as_they_ended() -> None:
    """Every Bedrock recording (its `body_b64`) is a cassette of its exact bytes, an event
    stream where it streamed; judged unfaulted, a complete one is accepted with its calls
    exactly, a stop that authorizes nothing (a guardrail, the output limit) or an error
    status refused."""
    recordings = sorted(CORPUS.glob("bedrock-*.json"))
    assert len(recordings) == 36
    found = import_sources(recordings)
    assert not found.skipped
    assert len(found.imported) == len(recordings)
    for path, imported in zip(recordings, found.imported, strict=True):
        recording = json.loads(path.read_text())
        cassette = imported.cassette
        assert cassette.protocol == "bedrock"
        if recording["body"] is None:
            assert cassette.body == base64.b64decode(recording["body_b64"]), path.name
        else:
            assert cassette.body == recording["body"].encode(), path.name
        expect = recording["expect"]
        if recording["status"] == 200:
            assert cassette.wire == "eventstream", path.name
            assert cassette.frames()[1] == b"", path.name  # whole messages to the end
        judged = asyncio.run(judge(cassette))
        authorizes = expect["complete"] and expect["finish"] in ("stop", "tool_calls")
        assert judged.accepted == authorizes, (path.name, judged.kind, judged.detail)
        if judged.accepted:
            assert judged.decision is not None
            names = [call["name"] for call in expect["tool_calls"]]
            assert [name for name, _ in judged.decision.calls] == names, path.name


@needs_corpus
def test_a_protocol_filter_skips_other_recordings() -> None:
    found = import_sources([CORPUS / "chat-magentic-26.json"], "anthropic")
    assert not found.imported
    assert "not --protocol anthropic" in found.skipped[0].reason
