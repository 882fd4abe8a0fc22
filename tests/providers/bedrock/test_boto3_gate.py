"""`gated_bedrock(client)`: a real boto3 `bedrock-runtime` client against a loopback
stand-in (`boto3_server`) serving event streams made with lockgate's encoder. A complete
tool call reaches the caller exactly as plain botocore reads it; every hostile answer raises
`BedrockGateError` (botocore's `EventStreamError`) before any tool use of it is read, where
plain botocore hands over the calls (and, for a cut last message, ends cleanly); text
reaches the caller before the terminal is even sent."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest

boto3 = pytest.importorskip("boto3")

import botocore.config  # type: ignore[import-untyped]  # noqa: E402
from botocore.exceptions import ClientError, EventStreamError  # type: ignore[import-untyped]  # noqa: E402

from lockgate import BedrockGateError, gated_bedrock  # noqa: E402
from lockgate.events import Event, ResponseStarted  # noqa: E402
from lockgate.providers.bedrock.render import ConverseBuilder, frame_bytes  # noqa: E402
from lockgate.proxy import GatingOptions  # noqa: E402
from lockgate.scripted.scenario import EDIT_FIX  # noqa: E402

from ...helpers import ROOT  # noqa: E402
from .boto3_server import BREAK, Answer, Wait, serving  # noqa: E402

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
EDIT_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "old": {"type": "string"},
        "new": {"type": "string"},
    },
    "required": ["path", "old", "new"],
    "additionalProperties": False,
}
READ_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}
TOOLS = [
    {
        "toolSpec": {
            "name": "edit",
            "description": "Edit a file",
            "inputSchema": {"json": EDIT_SCHEMA},
        }
    },
    {
        "toolSpec": {
            "name": "read",
            "description": "Read a file",
            "inputSchema": {"json": READ_SCHEMA},
        }
    },
]


def client(url: str, *, gated: bool = True, **config: Any) -> Any:
    made = boto3.client(
        "bedrock-runtime",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="lab-not-a-secret",
        aws_secret_access_key="lab-not-a-secret",  # a loopback stand-in
        config=botocore.config.Config(retries={"total_max_attempts": 1}, **config),
    )
    return gated_bedrock(made) if gated else made


def body(builder: ConverseBuilder) -> list[bytes]:
    return [frame_bytes(event) for event in builder.events]


def edit_call() -> ConverseBuilder:
    return (
        ConverseBuilder()
        .start()
        .text("Fixing the bug in add.", 2)
        .tool_use("tooluse_edit_1", "edit", EDIT_FIX, 4)
    )


def converse(bedrock: Any, into: list[dict[str, Any]]) -> None:
    """`converse_stream`, each event appended to `into` as it is read (an error raised by
    the iteration leaves what was read before it there)."""
    answer = bedrock.converse_stream(
        modelId=MODEL,
        messages=[{"role": "user", "content": [{"text": "fix calculator.py"}]}],
        toolConfig={"tools": TOOLS},
    )
    for event in answer["stream"]:
        into.append(event)


def tool_uses(events: list[dict[str, Any]]) -> list[str]:
    """The tool uses a caller read (a block start, or an input fragment)."""
    found = []
    for event in events:
        if "toolUse" in event.get("contentBlockStart", {}).get("start", {}):
            found.append(event["contentBlockStart"]["start"]["toolUse"]["name"])
        elif "toolUse" in event.get("contentBlockDelta", {}).get("delta", {}):
            found.append("+input")
    return found


def read_both(
    steps: Sequence[bytes | object],
) -> tuple[list[dict[str, Any]], Exception | None, list[dict[str, Any]], BedrockGateError]:
    """The same answer read by a plain client (its events, and what it raised) and by a
    gated one (its events before the refusal, and the refusal)."""
    plain: list[dict[str, Any]] = []
    gated: list[dict[str, Any]] = []
    raised: Exception | None = None
    with serving(Answer(steps), Answer(steps)) as server:
        try:
            converse(client(server.url, gated=False), plain)
        except Exception as exc:
            raised = exc
        with pytest.raises(BedrockGateError) as refused:
            converse(client(server.url), gated)
    return plain, raised, gated, refused.value


# --- accepted --------------------------------------------------------------------------


def test_a_complete_tool_call_is_released_exactly_as_botocore_reads_it() -> None:
    steps = body(edit_call().finish("tool_use"))
    plain: list[dict[str, Any]] = []
    gated: list[dict[str, Any]] = []
    with serving(Answer(steps), Answer(steps)) as server:
        converse(client(server.url, gated=False), plain)
        converse(client(server.url), gated)
        sent = json.loads(server.received[1].body)
    assert gated == plain
    assert tool_uses(gated) == ["edit"] + ["+input"] * 4
    assert [next(iter(e)) for e in gated][-2:] == ["messageStop", "metadata"]
    assert sent["toolConfig"]["tools"] == TOOLS  # the request went as the caller made it


def test_a_text_answer_passes() -> None:
    steps = body(ConverseBuilder().start().text("All fixed.", 3).finish("end_turn"))
    events: list[dict[str, Any]] = []
    with serving(Answer(steps)) as server:
        converse(client(server.url), events)
    said = "".join(
        e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e
    )
    assert said == "All fixed."


def test_text_reaches_the_caller_before_the_terminal_is_sent() -> None:
    """The server sends the text, then waits until the caller has read it: only then the
    call and the stop. A gate that held the text would leave the server waiting."""
    builder = edit_call().finish("tool_use")
    frames = body(builder)
    first_call = next(i for i, e in enumerate(builder.events) if e["type"] == "contentBlockStart")
    wait = Wait(seconds=5.0)
    steps: list[bytes | object] = [*frames[:first_call], wait, *frames[first_call:]]
    events: list[dict[str, Any]] = []
    with serving(Answer(steps)) as server:
        answer = client(server.url).converse_stream(
            modelId=MODEL,
            messages=[{"role": "user", "content": [{"text": "hi"}]}],
            toolConfig={"tools": TOOLS},
        )
        for event in answer["stream"]:
            events.append(event)
            if "text" in event.get("contentBlockDelta", {}).get("delta", {}):
                wait.event.set()
    assert wait.released is True  # the text was read while the server still held the rest
    assert tool_uses(events)[0] == "edit"


# --- refused ---------------------------------------------------------------------------


def _cut(where: str) -> list[bytes | object]:
    """A complete edit call whose `messageStop` message is cut in its prelude, headers or
    payload, the body then ending cleanly."""
    frames = body(edit_call())
    stop = frame_bytes({"type": "messageStop", "stopReason": "tool_use"})
    (head,) = struct.unpack_from(">I", stop, 4)
    cut = {"prelude": 7, "headers": 12 + head // 2, "payload": len(stop) - 9}[where]
    return [*frames, stop[:cut]]


@pytest.mark.parametrize("where", ["prelude", "headers", "payload"])
def test_a_cut_last_message_raises_where_botocore_ends_cleanly(where: str) -> None:
    plain, raised, gated, refused = read_both(_cut(where))
    assert raised is None  # botocore: a clean end, every call fragment read, no stop
    assert tool_uses(plain)[0] == "edit"
    assert not any("messageStop" in e for e in plain)
    assert refused.kind == "stream_ended"
    assert refused.transient
    assert refused.response["Error"]["Code"] == "serviceUnavailableException"
    assert "lockgate withheld 1 tool call" in str(refused)
    assert isinstance(refused, EventStreamError)
    assert isinstance(refused, ClientError)
    assert tool_uses(gated) == []
    assert "text" in gated[1]["contentBlockDelta"]["delta"]  # the text came before


def test_a_body_without_message_stop_raises() -> None:
    plain, raised, gated, refused = read_both(body(edit_call()))
    assert raised is None
    assert tool_uses(plain)[0] == "edit"
    assert refused.kind == "stream_ended"
    assert tool_uses(gated) == []


def test_a_bad_crc_raises() -> None:
    stop = bytearray(frame_bytes({"type": "messageStop", "stopReason": "tool_use"}))
    stop[-6] ^= 0x01  # a payload bit: the message CRC no longer matches
    plain, _raised, gated, refused = read_both([*body(edit_call()), bytes(stop)])
    assert tool_uses(plain)[0] == "edit"  # botocore handed the call over before its error
    assert refused.kind == "malformed_event"
    assert not refused.transient
    assert refused.response["Error"]["Code"] == "modelStreamErrorException"
    assert tool_uses(gated) == []


def test_an_exception_message_raises_before_any_tool_use() -> None:
    steps = body(edit_call().exception("modelStreamErrorException", "lab: the model failed"))
    plain, raised, gated, refused = read_both(steps)
    assert isinstance(raised, EventStreamError)
    assert tool_uses(plain)[0] == "edit"
    assert refused.kind == "provider_error"
    assert "the model failed" in str(refused)
    assert tool_uses(gated) == []


def test_a_throttling_exception_is_transient() -> None:
    steps = body(edit_call().exception("throttlingException", "Too many tokens."))
    _, _, gated, refused = read_both(steps)
    assert refused.transient
    assert refused.response["Error"]["Code"] == "serviceUnavailableException"
    assert tool_uses(gated) == []


def _two_calls(second: str, arguments: dict[str, Any]) -> list[bytes]:
    builder = edit_call().tool_use("tooluse_2", second, arguments, 2).finish("tool_use")
    return body(builder)


@pytest.mark.parametrize(
    ("name", "arguments", "reason"),
    [
        ("edit", {"path": 1}, "arguments do not match the schema"),
        ("delete_everything", {"path": "/"}, "delete_everything"),
    ],
    ids=["against-schema", "unknown-tool"],
)
def test_an_invalid_second_call_withholds_both(
    name: str, arguments: dict[str, Any], reason: str
) -> None:
    plain, raised, gated, refused = read_both(_two_calls(name, arguments))
    names = [used for used in tool_uses(plain) if used != "+input"]
    assert raised is None
    assert names == ["edit", name]
    assert refused.kind == "invalid_batch"
    assert refused.withheld == 2
    assert "lockgate withheld 2 tool calls" in str(refused)
    assert reason in str(refused)
    assert tool_uses(gated) == []


@pytest.mark.parametrize(
    ("stop", "kind"),
    [("malformed_tool_use", "invalid_batch"), ("max_tokens", "response_incomplete")],
)
def test_a_stop_reason_that_authorizes_nothing_raises(stop: str, kind: str) -> None:
    plain, raised, gated, refused = read_both(body(edit_call().finish(stop)))
    assert raised is None
    assert any(e.get("messageStop", {}).get("stopReason") == stop for e in plain)
    assert refused.kind == kind
    assert tool_uses(gated) == []


def test_a_broken_connection_raises_as_transport() -> None:
    frames = body(edit_call().finish("tool_use"))
    _, _, gated, refused = read_both([*frames[:-2], BREAK])
    assert refused.kind == "transport"
    assert refused.transient
    assert tool_uses(gated) == []


def test_silence_past_the_read_timeout_raises_as_idle() -> None:
    frames = body(edit_call().finish("tool_use"))
    steps: list[bytes | object] = [*frames[:3], Wait(seconds=3.0), *frames[3:]]
    events: list[dict[str, Any]] = []
    with serving(Answer(steps)) as server, pytest.raises(BedrockGateError) as refused:
        converse(client(server.url, read_timeout=0.5), events)
    assert refused.value.kind == "idle_timeout"
    assert refused.value.transient
    assert tool_uses(events) == []


def test_an_error_status_is_botocores_own_client_error() -> None:
    error = Answer(
        [json.dumps({"message": "Too many requests"}).encode()],
        status=429,
        content_type="application/json",
        headers=(("x-amzn-errortype", "ThrottlingException:http://internal.amazon.com/"),),
    )
    with serving(error) as server, pytest.raises(ClientError) as raised:
        converse(client(server.url), [])
    assert not isinstance(raised.value, BedrockGateError)
    assert raised.value.response["Error"]["Code"] == "ThrottlingException"


# --- how it is attached ----------------------------------------------------------------


def test_a_session_gates_the_clients_made_from_it_and_twice_is_once() -> None:
    """Each response is judged once, by the first gate: the first observer sees one
    `ResponseStarted` per response, a later gate's observer none."""
    first: list[Event] = []
    later: list[Event] = []
    session = boto3.Session(
        aws_access_key_id="lab-not-a-secret",
        aws_secret_access_key="lab-not-a-secret",
        region_name="us-east-1",
    )
    gated_bedrock(gated_bedrock(session, observer=first.append), observer=later.append)
    with serving(Answer(_cut("payload")), Answer(body(edit_call().finish("tool_use")))) as server:
        made = session.client("bedrock-runtime", endpoint_url=server.url)
        gated_bedrock(made, observer=later.append)  # on the client too: still one gate
        with pytest.raises(BedrockGateError):
            converse(made, [])
        events: list[dict[str, Any]] = []
        converse(made, events)
    assert tool_uses(events)[0] == "edit"
    assert sum(isinstance(event, ResponseStarted) for event in first) == 2
    assert later == []


def test_only_a_bedrock_runtime_client_or_a_session_is_taken() -> None:
    s3 = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    with pytest.raises(ValueError, match="bedrock-runtime"):
        gated_bedrock(s3)
    with pytest.raises(TypeError):
        gated_bedrock(object())


def test_the_options_apply() -> None:
    """`GatingOptions(validate_schemas=False)`: a call against its schema passes (the
    default checks it)."""
    steps = _two_calls("edit", {"path": 1})
    with serving(Answer(steps)) as server:
        made = gated_bedrock(client(server.url, gated=False), GatingOptions(validate_schemas=False))
        events: list[dict[str, Any]] = []
        converse(made, events)
    assert tool_uses(events).count("edit") == 2


# --- whole answers ----------------------------------------------------------------------


def _whole(builder: ConverseBuilder) -> Answer:
    return Answer([json.dumps(builder.response()).encode()], content_type="application/json")


def test_a_whole_converse_answer_is_judged() -> None:
    good = edit_call().finish("tool_use")
    bad = edit_call().tool_use("tooluse_2", "edit", {"path": 1}, 2).finish("tool_use")
    with serving(_whole(good), _whole(bad), _whole(bad)) as server:
        kwargs: dict[str, Any] = {
            "modelId": MODEL,
            "messages": [{"role": "user", "content": [{"text": "fix"}]}],
            "toolConfig": {"tools": TOOLS},
        }
        answer = client(server.url).converse(**kwargs)
        plain = client(server.url, gated=False).converse(**kwargs)
        with pytest.raises(BedrockGateError) as refused:
            client(server.url).converse(**kwargs)
    assert answer["output"]["message"]["content"][1]["toolUse"]["input"] == EDIT_FIX
    assert len(plain["output"]["message"]["content"]) == 3  # botocore hands both calls over
    assert refused.value.kind == "invalid_batch"
    assert refused.value.withheld == 2


# --- the users' doc ---------------------------------------------------------------------


def test_the_docs_example_runs_as_written() -> None:
    """`docs/bedrock-boto3.md`'s example, in a Python of its own, against the stand-in
    (`AWS_ENDPOINT_URL_BEDROCK_RUNTIME`): the text streams, the call comes out whole; then
    the same example on a cut answer raises `BedrockGateError` and prints no call."""
    text = (ROOT / "docs" / "bedrock-boto3.md").read_text(encoding="utf-8")
    code = text.split("```python bedrock-gated\n", 1)[1].split("```", 1)[0]
    with serving(Answer(body(edit_call().finish("tool_use"))), Answer(_cut("payload"))) as server:
        env = {
            **os.environ,
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": server.url,
            "AWS_ACCESS_KEY_ID": "lab-not-a-secret",
            "AWS_SECRET_ACCESS_KEY": "lab-not-a-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_MAX_ATTEMPTS": "1",
        }
        env.pop("AWS_PROFILE", None)
        runs = [
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
            )
            for _ in range(2)
        ]
    complete, cut = runs
    assert complete.returncode == 0, complete.stderr
    assert complete.stdout == "Fixing the bug in add.\ncall: edit\n"
    assert cut.returncode == 1
    assert "call:" not in cut.stdout
    assert "BedrockGateError" in cut.stderr
    assert "lockgate withheld 1 tool call: stream_ended" in cut.stderr


def test_a_stubbed_whole_answer_is_judged_too() -> None:
    """botocore's `Stubber` answers without a wire: the stubbed answer is judged."""
    from botocore.stub import Stubber  # type: ignore[import-untyped]

    bedrock = client("http://127.0.0.1:9")  # never reached: the stubber answers
    bad = edit_call().tool_use("tooluse_2", "delete_everything", {"path": "/"}, 2)
    kwargs: dict[str, Any] = {
        "modelId": MODEL,
        "messages": [{"role": "user", "content": [{"text": "fix"}]}],
        "toolConfig": {"tools": TOOLS},
    }
    with Stubber(bedrock) as stubber:
        stubber.add_response("converse", edit_call().finish("tool_use").response(), kwargs)
        stubber.add_response("converse", bad.finish("tool_use").response(), kwargs)
        answer = bedrock.converse(**kwargs)
        with pytest.raises(BedrockGateError) as refused:
            bedrock.converse(**kwargs)
    assert answer["stopReason"] == "tool_use"
    assert refused.value.kind == "invalid_batch"
    assert "delete_everything" in str(refused.value)
