"""What a client can read of a gated stream: only the events the gate judged, in the
canonical form; bytes it does not judge, a JSON answer to a stream request and the frames
its decoder skips never reach the client. Time is virtual (`support.run`)."""

from __future__ import annotations

import json

import pytest

from lockgate.proxy import Accepted, Refused
from lockgate.scripted.reply import Reply, Say

from .support import PROTOCOLS, keepalive_count, not_canonical, without_keepalives
from .test_engine import Upstream, edit_reply, gate, native_frames, split_at_hold


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_bytes_the_gate_does_not_judge_never_reach_the_client(provider: str) -> None:
    # Around a valid text-only stream: a call in a line some readers read and lockgate does
    # not (a byte order mark at a line start, a comment holding a separator that
    # `str.splitlines` splits on), fields and lines no event carries, CR line ends.
    call = b'data: {"smuggled": "call"}'
    frames = native_frames(provider, Reply("resp_engine", (Say("Only text."),)))
    odd = [
        b"\xef\xbb\xbf" + call + b"\n\n",
        b": note\xe2\x80\xa8" + call + b"\n\n",
        b": note\x0b" + call + b"\n\n",
        b"id: 7\nretry: 10\nunknown: field\n\n",
    ]
    crlf = [frame.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n") for frame in frames[1:]]
    body = [frames[0], *odd, *crlf]
    gated = gate(provider, Upstream(body))
    assert isinstance(gated.outcome, Accepted)
    assert b"smuggled" not in gated.output
    assert not_canonical(gated.output, gated.gateway) == []
    assert without_keepalives(gated.output, gated.gateway) == without_keepalives(
        b"".join(frames), gated.gateway
    )
    # the two comments reach the client as the gateway's own keep-alives
    expected = keepalive_count(b"".join(frames), gated.gateway) + 2
    assert keepalive_count(gated.output, gated.gateway) == expected


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_json_answer_to_a_stream_request_forwards_nothing(provider: str) -> None:
    body = json.dumps({"choices": [{"message": {"tool_calls": [{"id": "call_1"}]}}]}, indent=2)
    gated = gate(provider, Upstream([body.encode() + b"\n\n\n"]))
    assert isinstance(gated.outcome, Refused)
    assert gated.output == gated.pieces[-1]  # the refusal frame, and nothing before it
    assert b"call_1" not in gated.output


def test_frames_the_decoder_skips_are_not_forwarded() -> None:
    # Anthropic's frames without an `event:` line (the SDK skips them; litellm reads them),
    # a `[DONE]` in the middle of a Responses stream (the SDK stops reading there).
    anthropic = native_frames("anthropic", edit_reply())
    before, after = split_at_hold(anthropic)
    hidden = b'data: {"type":"content_block_start","index":9,"content_block":{"type":"text"}}\n\n'
    gated = gate("anthropic", Upstream([*before, hidden, *after]))
    assert isinstance(gated.outcome, Accepted)
    assert b'"index":9' not in gated.output
    responses = native_frames("responses", edit_reply())
    gated = gate("responses", Upstream([responses[0], b"data: [DONE]\n\n", *responses[1:]]))
    assert isinstance(gated.outcome, Accepted)
    assert b"[DONE]" not in gated.output
    assert gated.output == b"".join(responses)
