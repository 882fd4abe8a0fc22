"""The Bedrock decoder, framer, codec and error classifier, rule by rule."""

from __future__ import annotations

import json

import pytest

from lockgate.conversation import Message, ToolCall, ToolSpec
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import ProviderReportedFailure, ResponseCompleted, ResponseStarted
from lockgate.eventstream import EventMessage, Header, encode_message
from lockgate.providers.bedrock.codec import BedrockCodec, stream_path
from lockgate.providers.bedrock.decoder import BedrockDecoder
from lockgate.providers.bedrock.errors import classify_bedrock_failure
from lockgate.providers.bedrock.framing import EventStreamFramer, as_event
from lockgate.providers.bedrock.render import frame_bytes
from lockgate.sse import ServerSentEvent


def _event(name: str, **payload: object) -> ServerSentEvent:
    return ServerSentEvent(name, json.dumps(payload).encode())


def _decode(*events: ServerSentEvent) -> list[object]:
    decoder = BedrockDecoder()
    out: list[object] = []
    for event in events:
        out.extend(decoder.decode(event))
    out.extend(decoder.end_of_stream())
    return out


START = _event("messageStart", role="assistant")


@pytest.mark.parametrize(
    ("exception", "transient"),
    [
        ("throttlingException", True),
        ("serviceUnavailableException", True),
        ("internalServerException", True),
        ("modelTimeoutException", True),
        ("modelStreamErrorException", False),
        ("validationException", False),
    ],
)
def test_exception_messages_are_provider_errors_of_their_kind(
    exception: str, transient: bool
) -> None:
    body = encode_message(
        (
            Header.string(":exception-type", exception),
            Header.string(":content-type", "application/json"),
            Header.string(":message-type", "exception"),
        ),
        b'{"message":"slow down"}',
    )
    (event,) = EventStreamFramer().feed(body)
    (failure,) = _decode(START, event)[1:]
    assert isinstance(failure, ProviderReportedFailure)
    assert failure.kind is FailureKind.PROVIDER_ERROR
    assert failure.code == exception
    assert failure.transient is transient
    assert "slow down" in failure.message
    if exception == "throttlingException":
        assert "rate limited" in failure.message


def test_an_error_message_carries_its_code_and_message() -> None:
    message = EventMessage(
        (
            Header.string(":message-type", "error"),
            Header.string(":error-code", "InternalFailure"),
            Header.string(":error-message", "it broke"),
        ),
        b"",
    )
    (failure,) = _decode(as_event(message))
    assert isinstance(failure, ProviderReportedFailure)
    assert failure.code == "InternalFailure"
    assert "it broke" in failure.message


def test_a_message_without_a_type_is_malformed() -> None:
    with pytest.raises(ResponseFailure) as caught:
        as_event(EventMessage((Header.string(":event-type", "messageStart"),), b"{}"))
    assert caught.value.kind is FailureKind.MALFORMED_EVENT


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("max_tokens", FailureKind.RESPONSE_INCOMPLETE),
        ("model_context_window_exceeded", FailureKind.RESPONSE_INCOMPLETE),
        ("guardrail_intervened", FailureKind.RESPONSE_INCOMPLETE),
        ("content_filtered", FailureKind.RESPONSE_INCOMPLETE),
        ("malformed_tool_use", FailureKind.INVALID_BATCH),
        ("malformed_model_output", FailureKind.RESPONSE_FAILED),
        ("something_new", FailureKind.LIFECYCLE),
    ],
)
def test_stop_reasons_that_release_nothing(reason: str, kind: FailureKind) -> None:
    *_, terminal = _decode(START, _event("messageStop", stopReason=reason))
    assert isinstance(terminal, ProviderReportedFailure)
    assert terminal.kind is kind


def test_the_decision_waits_for_the_end_of_the_body_after_metadata() -> None:
    decoder = BedrockDecoder()
    (started,) = decoder.decode(START)
    assert isinstance(started, ResponseStarted)
    assert decoder.decode(_event("messageStop", stopReason="tool_use")) == ()
    usage = {"inputTokens": 5, "outputTokens": 2, "totalTokens": 7}
    assert decoder.decode(_event("metadata", usage=usage)) == ()
    (terminal,) = decoder.end_of_stream()
    assert isinstance(terminal, ResponseCompleted)
    assert terminal.usage is not None
    assert terminal.usage.total_tokens == 7
    with pytest.raises(ResponseFailure) as caught:
        decoder.decode(_event("contentBlockDelta", contentBlockIndex=0, delta={"text": "x"}))
    assert caught.value.kind is FailureKind.LIFECYCLE


def test_no_message_stop_is_stream_ended() -> None:
    (failure,) = _decode(START)[1:]
    assert isinstance(failure, ProviderReportedFailure)
    assert failure.kind is FailureKind.STREAM_ENDED


@pytest.mark.parametrize(
    "events",
    [
        [_event("contentBlockDelta", contentBlockIndex=0, delta={"text": "x"})],
        [START, START],
        [START, _event("messageStart", role="user")],
        [START, _event("contentBlockStop", contentBlockIndex=0)],
        [
            START,
            _event("contentBlockDelta", contentBlockIndex=1, delta={"text": "x"}),
            _event("contentBlockDelta", contentBlockIndex=0, delta={"text": "y"}),
        ],
        [START, _event("metadata", usage={})],
    ],
)
def test_lifecycle_violations(events: list[ServerSentEvent]) -> None:
    with pytest.raises(ResponseFailure) as caught:
        _decode(*events)
    assert caught.value.kind is FailureKind.LIFECYCLE


def test_a_cut_body_is_stream_ended_and_a_flipped_bit_malformed() -> None:
    body = frame_bytes({"type": "messageStart", "role": "assistant"})
    framer = EventStreamFramer()
    framer.feed(body[:-1])
    with pytest.raises(ResponseFailure) as cut:
        framer.finish()
    assert cut.value.kind is FailureKind.STREAM_ENDED
    flipped = bytearray(body)
    flipped[20] ^= 4
    with pytest.raises(ResponseFailure) as corrupt:
        EventStreamFramer().feed(bytes(flipped))
    assert corrupt.value.kind is FailureKind.MALFORMED_EVENT


def test_the_request_replays_reasoning_calls_and_results() -> None:
    codec = BedrockCodec("m:1")
    producer = codec.producer
    call = ToolCall("tooluse_1", "read", {"path": "a"})
    history = [
        Message("system", "Be brief."),
        Message("user", "go"),
        Message("assistant", "Reading.", tool_calls=(call,), producer=producer),
        Message("tool", "error: no such file", tool_call_id="tooluse_1"),
    ]
    tools = [ToolSpec("read", "", {"type": "object", "properties": {}})]
    request = codec.encode(history, tools)
    assert request["model"] == "m:1"
    assert request["system"] == [{"text": "Be brief."}]
    assert request["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"] == {
        "json": {"type": "object", "properties": {}}
    }
    assistant, result = request["messages"][1:]
    assert assistant["content"][-1] == {
        "toolUse": {"toolUseId": "tooluse_1", "name": "read", "input": {"path": "a"}}
    }
    assert result["content"][0]["toolResult"]["status"] == "error"
    assert stream_path("m:1") == "/model/m%3A1/converse-stream"
    with pytest.raises(ValueError, match="no toolResult"):
        codec.encode(history[:3], tools)


def test_error_classification() -> None:
    throttled = classify_bedrock_failure(
        429, {"message": "slow"}, {"x-amzn-errortype": "ThrottlingException:http://x"}
    )
    assert throttled.retryable
    quota = classify_bedrock_failure(
        429, {"message": "spent", "__type": "ServiceQuotaExceededException"}, {}
    )
    assert quota.kind is FailureKind.QUOTA_EXHAUSTED
    assert not classify_bedrock_failure(400, {"message": "bad model"}).retryable
