"""boto3 against `lockgate serve --provider bedrock` (a loopback server the test starts): the
lab's event streams are what boto3's `converse_stream` reads, and on a cut final message
botocore ends cleanly where lockgate refuses — the failure issue 29 is about."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.lab.scenarios import SCENARIOS_BY_NAME
from lockgate.lab.server import ServerThread

boto3 = pytest.importorskip("boto3")
botocore_config = pytest.importorskip("botocore.config")

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"


def _events(scenario: str) -> tuple[list[dict[str, Any]], str]:
    with ServerThread(SCENARIOS_BY_NAME[scenario].turns(), provider="bedrock") as running:
        client = boto3.client(
            "bedrock-runtime",
            region_name="us-east-1",
            endpoint_url=running.base_url,
            aws_access_key_id="lab-not-a-secret",
            aws_secret_access_key="lab-not-a-secret",  # a loopback stand-in
            config=botocore_config.Config(retries={"max_attempts": 0}),
        )
        answer = client.converse_stream(
            modelId=MODEL, messages=[{"role": "user", "content": [{"text": "fix it"}]}]
        )
        events = list(answer["stream"])
        assert running.server is not None
        path = running.server.requests[0].path
    return events, path


def test_boto3_reads_the_lab_stream_as_lockgate_does() -> None:
    events, path = _events("bedrock-tool-use")
    assert path == "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"
    kinds = [next(iter(event)) for event in events]
    assert kinds[0] == "messageStart"
    assert kinds[-2:] == ["messageStop", "metadata"]
    start = next(e["contentBlockStart"] for e in events if "contentBlockStart" in e)
    assert start["start"]["toolUse"]["name"] == "edit"
    arguments = "".join(
        e["contentBlockDelta"]["delta"]["toolUse"]["input"]
        for e in events
        if "toolUse" in e.get("contentBlockDelta", {}).get("delta", {})
    )
    assert arguments.startswith('{"path": "calculator.py"')
    assert events[-2]["messageStop"]["stopReason"] == "tool_use"


@pytest.mark.parametrize("where", ["prelude", "headers", "payload"])
def test_botocore_ends_a_cut_stream_cleanly_where_lockgate_refuses(where: str) -> None:
    """The same bytes lockgate's lab refuses (`bedrock-cut-in-*`: `stream_ended`): boto3
    reads every call fragment and ends without an error and without the stop."""
    events, _ = _events(f"bedrock-cut-in-{where}")
    kinds = [next(iter(event)) for event in events]
    assert "contentBlockStop" in kinds
    assert "messageStop" not in kinds  # cut: botocore just stops, no error raised
