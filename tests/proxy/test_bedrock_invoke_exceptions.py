"""An `exception` message in an invoke stream (Bedrock's own in-stream error: throttling,
a model stream error) after a complete tool call: the proxy reads it as the Anthropic error
it means (`invoke._anthropic_error`), refuses the response as `provider_error` (never
`malformed_event`), withholds the call, and boto3 raises on the proxy's refusal, which is
the last message of the body."""

from __future__ import annotations

import json
from urllib.parse import quote

import aiohttp
import pytest
from botocore.exceptions import EventStreamError  # type: ignore[import-untyped]

from lockgate.eventstream import (
    MAX_MESSAGE_BYTES,
    MEDIA_TYPE,
    EventStreamDecoder,
    encode_message,
)
from lockgate.providers.bedrock.framing import message_headers
from lockgate.providers.bedrock.invoke import WIRE
from lockgate.proxy.server import ProxyConfig, serving

from .test_bedrock_invoke import invoke_body, served, stream_through, tool_uses
from .test_bedrock_proxy import MODEL
from .test_server import ACCEPTED, gating
from .test_server_protocols import recording_upstream


def _with_exception_before_the_stop(kind: str) -> bytes:
    """The complete response, its `message_delta` and `message_stop` replaced by `kind`."""
    messages = EventStreamDecoder(MAX_MESSAGE_BYTES).feed(served(ACCEPTED))
    kept = [m for m in messages if WIRE.as_event(m).event not in ("message_delta", "message_stop")]
    payload = json.dumps({"message": f"{kind} (upstream)"}).encode()
    exception = encode_message(message_headers(kind, "exception"), payload)
    return b"".join(encode_message(m.headers, m.payload) for m in kept) + exception


@pytest.mark.parametrize(
    ("kind", "refused_as"),
    [
        ("throttlingException", "serviceUnavailableException"),
        ("modelStreamErrorException", "modelStreamErrorException"),
    ],
)
async def test_an_upstream_exception_is_a_provider_error_and_the_call_never_reaches_boto3(
    kind: str, refused_as: str
) -> None:
    events, raised, records, _, _ = await stream_through(_with_exception_before_the_stop(kind))
    assert isinstance(raised, EventStreamError)
    error = raised.response["Error"]
    assert error["Code"] == refused_as  # a transient upstream error may be retried
    assert "provider_error" in error["Message"]
    assert kind in error["Message"]
    assert "malformed_event" not in error["Message"]
    assert tool_uses(events) == []
    assert records[0].outcome in ("refused", "withheld")


def test_the_mapping_reads_an_exception_as_an_anthropic_error_event() -> None:
    payload = json.dumps({"message": "slow down"}).encode()
    [message] = EventStreamDecoder(MAX_MESSAGE_BYTES).feed(
        encode_message(message_headers("throttlingException", "exception"), payload)
    )
    event = WIRE.as_event(message)
    assert event.event == "error"
    error = json.loads(event.data)["error"]
    assert error["code"] == "throttlingException"
    assert error["type"] == "overloaded_error"  # transient, as ConverseStream's table says
    assert "slow down" in error["message"]


@pytest.mark.parametrize("fault", ["exception", "cut"])
async def test_the_refusal_is_the_last_message_and_no_cut_is_left(fault: str) -> None:
    """The bytes a client reads: whole messages only, the last one the proxy's exception
    (a cut upstream message is never passed on as the body's last bytes)."""
    if fault == "exception":
        body = _with_exception_before_the_stop("modelStreamErrorException")
    else:
        whole = served(ACCEPTED)
        body = whole[: len(whole) - 20]  # inside the final message
    async with (
        recording_upstream(body, MEDIA_TYPE) as (upstream, _, _),
        serving(ProxyConfig(upstream, gating=gating())) as running,
        aiohttp.ClientSession() as session,
        session.post(
            f"{running.url}/model/{quote(MODEL, safe='')}/invoke-with-response-stream",
            json=invoke_body(),
        ) as response,
    ):
        data = await response.read()
    decoder = EventStreamDecoder(MAX_MESSAGE_BYTES)
    messages = decoder.feed(data)
    decoder.finish()  # raises on a cut: none is left
    assert messages
    last = dict((header.name, header.value) for header in messages[-1].headers)
    assert last[":message-type"] == "exception"
    assert b'"tool_use"' not in b"".join(WIRE.as_event(m).data for m in messages[:-1])
