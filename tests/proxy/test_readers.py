"""The engine's output read by the clients that disagree (`readers.py`): what the gate judged
must be exactly what every client reads.

The other proxy tests read the output with lockgate's own `SSEDecoder`, so they cannot see
bytes the gate ignored and another client reads (issue 22, H1 and M2). Here every output is
read by every reader of its protocol (the TypeScript SDKs' rules, litellm's Anthropic
route, `str.splitlines` clients, the specification, the official Python SDKs' decoders, a
JSON reader), and each reader's naive client (`readers.calls_seen`) must see no tool call
that the gate did not release: none at all in a refused stream.

- The audit's reproductions: a line starting with U+FEFF that holds a call, in a stream
  accepted as text only; an Anthropic frame without `event:` holding a `tool_use`;
  comments holding each separator `str.splitlines` splits on, then a `data:` line holding a
  call, while the engine holds and in a refused stream; a JSON answer holding a call on a
  stream request.
- A property over generated framing: scripted streams with mutated framing (line ends,
  byte order marks, comments holding separators and calls, unknown fields, `id:` and
  `retry:`, multi-line data, frames without a name or without data, an unterminated tail,
  reads cut anywhere): every reader reads the same events from the output, and no naive
  client sees a call the decision did not release; every released call is seen.
- An upstream `id:` line and a comment, which the official Python SDKs turn into an event
  with empty data that they cannot parse.
- The differential fuzz (`differential.py`) on a tiny budget.
- Opt-in (`LOCKGATE_TS_SDKS=<a node_modules holding openai and @anthropic-ai/sdk>`, with
  `node` on the PATH): the TypeScript ports against the real SDKs on odd framing.

Time is virtual (`support.run`): nothing waits on the wall clock.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import random
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate.conversation import ToolCall
from lockgate.proxy import Accepted
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.scenario import EDIT_FIX

from . import differential
from .readers import (
    EVIL,
    audit,
    calls_seen,
    evil_data,
    read_anthropic_node,
    read_genai_node,
    read_json_lines,
    read_lockgate,
    read_openai_node,
)
from .support import (
    PROTOCOLS,
    Chunks,
    Gated,
    gate_stream,
    options,
    request_for,
    run,
    sdk_reads,
)
from .test_engine import edit_reply, native_frames, split_at_hold

BOM = b"\xef\xbb\xbf"
# What `str.splitlines` splits on besides CR and LF (httpx's `iter_lines` follows it).
SEPARATORS = {
    "VT": b"\x0b",
    "FF": b"\x0c",
    "FS": b"\x1c",
    "GS": b"\x1d",
    "RS": b"\x1e",
    "NEL": "\x85".encode(),
    "LS": "\u2028".encode(),
    "PS": "\u2029".encode(),
}


def text_reply() -> Reply:
    return Reply("resp_text", (Say("All done, nothing to change."),))


def gated(provider: str, reads: Sequence[bytes]) -> Gated:
    gating = options(deadline=600.0)
    return run(gate_stream(provider, request_for(provider), Chunks(reads), gating))


def released(outcome: object) -> tuple[ToolCall, ...] | None:
    return outcome.decision.message.tool_calls if isinstance(outcome, Accepted) else None


def leaks(provider: str, result: Gated, chunks: Sequence[bytes] = ()) -> dict[str, Any]:
    """Per reader, the calls its naive client saw in the output that the gate did not
    release (empty: none did)."""
    found = audit(provider, chunks or result.pieces, released(result.outcome))
    return {name: [(c.id, c.name, c.where) for c in calls] for name, calls in found.leaked.items()}


# --- the audit's reproductions ---------------------------------------------------------------


def _after_first(frames: list[bytes], extra: bytes) -> list[bytes]:
    return [frames[0], extra, *frames[1:]]


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_line_starting_with_a_byte_order_mark_holds_no_call_any_client_reads(
    provider: str,
) -> None:
    """H1: lockgate reads `\\ufeffdata:` as an unknown field; the TypeScript SDKs strip the
    mark from every line and read a `data:` line (a call, in a text-only stream)."""
    name, _ = EVIL[provider]
    named = b"" if name is None else b"event: " + name.encode() + b"\n"
    frame = named + BOM + b"data: " + evil_data(provider) + b"\n\n"
    result = gated(provider, _after_first(native_frames(provider, text_reply()), frame))
    assert released(result.outcome) == ()  # accepted, as text only
    assert leaks(provider, result) == {}


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_byte_order_mark_before_the_first_event_hides_no_call(provider: str) -> None:
    """H1: a body starting with U+FEFF: the specification strips that one mark (so does
    every TypeScript SDK), lockgate read the line as an unknown field."""
    frames = native_frames(provider, text_reply())
    first = BOM + b"data: " + evil_data(provider) + b"\n\n"
    result = gated(provider, [first, *frames])
    assert leaks(provider, result) == {}


def test_an_anthropic_frame_without_event_holding_a_tool_use_reaches_no_client() -> None:
    """H1: the Anthropic decoder (and SDK) skip a frame without `event:`; litellm's
    Anthropic route reads every `data:` line by its `type`."""
    frames = native_frames("anthropic", text_reply())
    frame = b"data: " + evil_data("anthropic") + b"\n\n"
    result = gated("anthropic", [*frames[:2], frame, *frames[2:]])
    assert released(result.outcome) == ()  # accepted, as text only
    assert leaks("anthropic", result) == {}


@pytest.mark.parametrize("state", ["holding", "refused"])
@pytest.mark.parametrize("separator", sorted(SEPARATORS))
@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_comment_holding_a_line_separator_and_a_call_reaches_no_client(
    provider: str, separator: str, state: str
) -> None:
    """H1: a comment passes at once, even while frames are held and in a stream then
    refused; a client splitting lines with `str.splitlines` reads what follows the
    separator as a `data:` line."""
    before, after = split_at_hold(native_frames(provider, edit_reply()))
    comment = b": keep-alive" + SEPARATORS[separator] + b"data: " + evil_data(provider) + b"\n\n"
    # Refused: a clean end too early (Gemini's call is one chunk: before its finish).
    rest = after[1:] if state == "holding" else after[1 : min(2, len(after) - 1)]
    result = gated(provider, [*before, after[0], comment, *rest])
    assert isinstance(result.outcome, Accepted) == (state == "holding")
    assert leaks(provider, result) == {}


def whole_answer(provider: str) -> dict[str, Any]:
    """A whole (non-streamed) answer holding one call, in the protocol's shape."""
    arguments = json.dumps(EDIT_FIX)
    if provider == "chat":
        function = {"name": "edit", "arguments": arguments}
        call = {"id": "call_1", "type": "function", "function": function}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
        return {"id": "chatcmpl-1", "object": "chat.completion", "choices": [choice]}
    if provider == "gemini":
        part = {"functionCall": {"id": "call_1", "name": "edit", "args": EDIT_FIX}}
        content = {"parts": [part], "role": "model"}
        return {"candidates": [{"content": content, "finishReason": "STOP", "index": 0}]}
    if provider == "responses":
        item = {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "edit",
            "arguments": arguments,
            "status": "completed",
        }
        return {"id": "resp_1", "object": "response", "status": "completed", "output": [item]}
    block = {"type": "tool_use", "id": "toolu_1", "name": "edit", "input": EDIT_FIX}
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [block],
        "stop_reason": "tool_use",
    }


@pytest.mark.parametrize("blank", [b"\n\n", b"\r\n\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_json_answer_to_a_stream_request_reaches_no_client(provider: str, blank: bytes) -> None:
    """M2: a 2xx answer that is not SSE (a JSON body holding a call, then a blank line) to a
    request that asked for a stream: the engine refuses it, and nothing of it may come
    before the refusal."""
    body = json.dumps(whole_answer(provider)).encode() + blank
    result = gated(provider, [body])
    assert not isinstance(result.outcome, Accepted)
    assert leaks(provider, result) == {}


@pytest.mark.parametrize("blank", [b"", b"\n\n", b"\r\n\r\n"], ids=["none", "lf", "crlf"])
def test_a_gemini_json_array_answer_reaches_no_client(blank: bytes) -> None:
    """What `:streamGenerateContent` answers without `alt=sse` (the proxy refuses such a
    request; an upstream may still answer so): one JSON array of chunks, a call in one."""
    text = {"candidates": [{"content": {"parts": [{"text": "Fixing."}], "role": "model"}}]}
    body = json.dumps([text, whole_answer("gemini")], indent=2).encode() + blank
    for reads in ([body], [body[:7], body[7:]]):
        result = gated("gemini", reads)
        assert not isinstance(result.outcome, Accepted)
        assert leaks("gemini", result) == {}
        assert calls_seen("gemini", read_json_lines([body]))  # the naive client reads it


@pytest.mark.parametrize("state", ["text only", "held"])
def test_a_gemini_call_spelled_in_snake_case_beside_text_reaches_no_client(state: str) -> None:
    """google-genai reads a part's `function_call` as its call; lockgate's decoder read the
    part holding it and text as the text (before the gateway refused it)."""
    evil = EVIL["gemini"][1]["candidates"][0]["content"]["parts"][0]["functionCall"]
    chunk = {
        "candidates": [
            {
                "content": {"parts": [{"text": "Fine.", "function_call": evil}], "role": "model"},
                "index": 0,
            }
        ]
    }
    frames = native_frames("gemini", text_reply() if state == "text only" else edit_reply())
    frame = b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n"
    result = gated("gemini", [*frames[:-1], frame, frames[-1]])
    assert not isinstance(result.outcome, Accepted)
    assert leaks("gemini", result) == {}
    assert calls_seen("gemini", read_lockgate([frame]))  # the naive client reads it


# --- a property over generated framing -------------------------------------------------------

REPLIES = (
    text_reply(),
    edit_reply(),
    Reply(
        "resp_two",
        (
            Say("Reading first."),
            Call("call_1", "read", {"path": "calculator.py"}, 3),
            Call("call_2", "edit", EDIT_FIX, 4),
        ),
    ),
    Reply("resp_bad", (Call("call_1", "shell", {"command": "ls"}, 2),)),  # no such tool
    Reply("resp_cut", (Say("Fixing."), Call("call_1", "edit", EDIT_FIX, 4)), "truncated"),
    Reply("resp_err", (Say("Fixing."),), "error"),
    Reply(  # JSON holding raw U+2028, U+2029, U+0085 and U+FEFF inside its strings
        "resp_raw",
        (
            Say("Line\u2028two\u2029three\x85four\ufeff.", 2),
            Call("call_1", "edit", {**EDIT_FIX, "new": "return a + b\u2028# fixed"}, 3),
        ),
    ),
)
_NOTES = st.sampled_from([b"keep-alive", b"", b"x", "caf\u00e9".encode()])
_LINE_ENDS = (b"\n", b"\r\n", b"\r")


def _data_lines(data: bytes) -> list[bytes]:
    """Data as several `data:` lines meaning the same JSON (joined with LF again)."""
    try:
        value = json.loads(data)
    except ValueError:
        return [b"data: " + data]
    return [b"data: " + line.encode() for line in json.dumps(value, indent=1).split("\n")]


@st.composite
def mutated_framing(draw: st.DrawFn, provider: str) -> list[bytes]:
    """A scripted stream with its framing mutated, in reads."""
    reply = draw(st.sampled_from(REPLIES))
    # Each frame's lines, LF-ended (Gemini frames its events with CRLF); the ends drawn below.
    native = [frame.replace(b"\r\n", b"\n") for frame in native_frames(provider, reply)]
    frames = [frame[:-2].split(b"\n") for frame in native]
    evil = evil_data(provider)
    name, _ = EVIL[provider]
    evil_name = [] if name is None else [b"event: " + name.encode()]
    for _ in range(draw(st.integers(0, 5))):
        at = draw(st.integers(0, len(frames)))
        inside = frames[at] if at < len(frames) else None
        line_at = draw(st.integers(0, len(inside))) if inside is not None else 0
        separator = draw(st.sampled_from([b"", *SEPARATORS.values()]))
        op = draw(
            st.sampled_from(
                [
                    "bom line",
                    "bom prefix",
                    "comment",
                    "comment frame",
                    "unknown field",
                    "id retry",
                    "multi-line data",
                    "data only",
                    "data-only call",
                    "event only",
                    "no space",
                    "blank line",
                ]
            )
        )
        own: list[bytes] | None = None  # a frame of its own, inserted at `at`
        line: bytes | None = None  # a line inserted into frame `at`
        if op == "bom line":
            own = [*evil_name, BOM + b"data: " + evil]
        elif op == "bom prefix" and inside:
            index = min(line_at, len(inside) - 1)
            inside[index] = BOM + inside[index]
        elif op == "comment":
            line = b": " + draw(_NOTES) + separator + b"data: " + evil
        elif op == "comment frame":
            own = [b": " + draw(_NOTES) + separator]
        elif op == "unknown field":
            line = draw(st.sampled_from([b"x-note: 1", b"DATA: " + evil, b"data : " + evil]))
        elif op == "id retry":
            line = draw(st.sampled_from([b"id: 42", b"retry: 10", b"id", b"retry: soon"]))
        elif op == "multi-line data" and inside:
            data_at = [i for i, text in enumerate(inside) if text.startswith(b"data: ")]
            if data_at:
                first = data_at[0]
                inside[first : first + 1] = _data_lines(inside[first][6:])
        elif op == "data only" and inside:
            inside[:] = [text for text in inside if not text.startswith(b"event:")]
        elif op == "data-only call":
            own = [b"data: " + evil]
        elif op == "event only":
            own = [draw(st.sampled_from([b"event: " + (name or "message").encode(), b"event:"]))]
        elif op == "no space" and inside:
            inside[:] = [b"data:" + t[6:] if t.startswith(b"data: ") else t for t in inside]
        elif op == "blank line":
            own = []
        if own is not None:
            frames.insert(at, own)
        elif line is not None and inside is not None:
            inside.insert(line_at, line)
    style = draw(st.sampled_from(["lf", "lf", "crlf", "cr", "mixed"]))

    def end() -> bytes:
        if style == "mixed":
            return draw(st.sampled_from(_LINE_ENDS))
        return {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}[style]

    pieces: list[bytes] = []
    for frame in frames:
        pieces.extend(text + end() for text in frame)
        pieces.append(end())
    body = b"".join(pieces)
    if draw(st.integers(0, 9)) == 0:
        body = BOM + body
    tail = draw(st.sampled_from([b"", b"", b"", b"data: " + evil, b": trailing", evil]))
    body += tail
    return _recut(body, draw(st.lists(st.integers(0, len(body)), max_size=6)))


def _recut(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(min(cut, len(data)) for cut in cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("provider", PROTOCOLS)
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_reader_reads_what_the_gate_judged(provider: str, data: st.DataObject) -> None:
    reads = data.draw(mutated_framing(provider))
    result = gated(provider, reads)
    cuts = data.draw(st.lists(st.integers(0, len(result.output)), max_size=4))
    for chunks in (result.pieces, _recut(result.output, cuts)):
        found = audit(provider, chunks, released(result.outcome))
        assert found.disagreements == ()
        assert found.leaked == {}
    if isinstance(result.outcome, Accepted):
        seen = calls_seen(provider, read_lockgate(result.pieces))
        for call in result.outcome.decision.message.tool_calls:
            assert any(s.name == call.name and s.id in (None, "", call.id) for s in seen), call


# --- the differential fuzz, on a tiny budget -----------------------------------------------------


def test_the_differential_fuzz_reads_no_call_the_gate_did_not_release(
    capsys: pytest.CaptureFixture[str],
) -> None:
    if not differential.CORPUS.is_dir():
        pytest.skip(f"no real recordings at {differential.CORPUS}")
    code = differential.main(["--budget", "60", "--seed", "1"])
    printed = capsys.readouterr().out
    assert "mutations run: 60" in printed
    assert code == 0, printed


# --- the TypeScript ports against the real SDKs (opt-in) ---------------------------------------

_NODE_HARNESS = r"""
const root = process.env.LOCKGATE_TS_SDKS;
const sdks = {
  openai: require(root + '/openai/core/streaming.js'),
  anthropic: require(root + '/@anthropic-ai/sdk/core/streaming.js'),
};
async function read(sdk, chunks) {
  const body = new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(new Uint8Array(Buffer.from(chunk, 'base64')));
      controller.close();
    },
  });
  const events = [];
  for await (const sse of sdk._iterSSEMessages(new Response(body), new AbortController())) {
    events.push([sse.event, sse.data]);
  }
  return events;
}
(async () => {
  let input = '';
  for await (const piece of process.stdin) input += piece;
  const results = [];
  for (const chunks of JSON.parse(input)) {
    const openai = await read(sdks.openai, chunks);
    results.push({ openai, anthropic: await read(sdks.anthropic, chunks) });
  }
  process.stdout.write(JSON.stringify(results));
})();
"""

_ATOMS = (
    b'data: {"a":1}',
    b"data:x",
    b"data",
    b"event: e",
    b"event:",
    b": c",
    b"id: 1",
    b"retry: 5",
    BOM + b"data: bom",
    BOM,
    BOM + b"event: b",
    b"foo: bar",
    b"data:  two",
    "\x85".encode(),
    "\u2028".encode(),
    b"\x0b",
    b"\xff",
    b"\xe2\x80",
    b" data: y",
)
_ENDS = (b"\n", b"\r", b"\r\n", b"\n\n", b"\r\r", b"\r\n\r\n", b"\n\r", b"")


def _odd_bodies(count: int, seed: int) -> list[list[bytes]]:
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        body = b"".join(rng.choice(_ATOMS) + rng.choice(_ENDS) for _ in range(rng.randint(0, 12)))
        cuts = sorted(rng.randint(0, len(body)) for _ in range(rng.randint(0, 6)))
        cases.append(_recut(body, cuts))
    return cases


@pytest.mark.skipif(
    not os.environ.get("LOCKGATE_TS_SDKS") or shutil.which("node") is None,
    reason="set LOCKGATE_TS_SDKS to a node_modules holding openai and @anthropic-ai/sdk",
)
def test_the_typescript_ports_read_as_the_real_sdks() -> None:
    cases = _odd_bodies(2000, 22)
    payload = json.dumps([[base64.b64encode(chunk).decode() for chunk in c] for c in cases])
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run(
        [node, "-e", _NODE_HARNESS],
        input=payload,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    results: list[Mapping[str, list[list[str | None]]]] = json.loads(done.stdout)
    ports = {"openai": read_openai_node, "anthropic": read_anthropic_node}
    for chunks, result in zip(cases, results, strict=True):
        for sdk, port in ports.items():
            assert [[e.event, e.data] for e in port(chunks)] == result[sdk], (sdk, chunks)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_an_upstream_id_line_then_a_comment_breaks_no_official_sdk(provider: str) -> None:
    """The official Python SDKs keep an `id:` for the rest of the stream and then dispatch
    every comment-only frame as an event with empty data, which their stream JSON-parses:
    an upstream's `id:` line followed by a keep-alive comment must not reach them."""
    frames = native_frames(provider, edit_reply())
    before, after = split_at_hold(frames)
    upstream = [b"id: 1\n" + before[0], b": keep-alive\n\n", *before[1:], *after]
    result = gated(provider, upstream)
    assert isinstance(result.outcome, Accepted)
    assert run(sdk_reads(provider, result.output)) == []


def test_the_node_gemini_client_reads_the_error_it_raises_on() -> None:
    # @google/genai parses each read whole; a read that is exactly the refusal's JSON (the
    # stream cut after `data:`) raises ApiError with it: the client read the refusal, as
    # every other reader does (hypothesis found the cut; it was counted a disagreement).
    error = {"error": {"code": 400, "message": "lockgate withheld 1 tool call"}}
    chunks = [b"data:", b" " + json.dumps(error).encode() + b"\n\n"]
    assert [json.loads(event.data) for event in read_genai_node(chunks)] == [error]
