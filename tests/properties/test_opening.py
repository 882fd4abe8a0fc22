"""Openings, as a property: only the opening is retried, at most three times.

Under any sequence of HTTP statuses, dropped connections and server waits, the attempts and
the waits are those the plan implies (the server's word over the backoff).
"""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate.conversation import Message
from lockgate.errors import ResponseFailure
from lockgate.fixture import ALL_TOOLS
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.scripted.script import Turn

from ..helpers import replay_client

EXAMPLES = 400
HISTORY = [Message("user", "go")]

OPENING_STEPS: dict[str, Turn | None] = {
    "ok": None,
    "drop": Turn(connection_error=True),
    "429-quota": Turn(status=429, body={"error": {"code": "insufficient_quota", "message": "q"}}),
    "503-no-retry": Turn(status=503, headers={"x-should-retry": "false"}),
    "400-retry": Turn(status=400, headers={"x-should-retry": "true"}),
    "503-after-1s": Turn(status=503, headers={"retry-after": "1"}),
    "429-after-3600s": Turn(status=429, headers={"retry-after": "3600"}),
    **{
        str(status): Turn(status=status, body={"error": {"message": str(status)}})
        for status in (400, 401, 403, 404, 408, 409, 422, 429, 500, 502, 503, 529)
    },
}
RETRYABLE_STEPS = {
    "drop",
    "400-retry",
    "503-after-1s",
    "408",
    "409",
    "429",
    "500",
    "502",
    "503",
    "529",
}

openings = st.lists(st.sampled_from(sorted(OPENING_STEPS)), min_size=1, max_size=5)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(openings)
def test_only_opening_is_retried_and_at_most_three_times(plan: list[str]) -> None:
    plan = [*plan, "401"]  # the provider's last word, should the client still be asking
    answer = ResponseBuilder("resp_ok").created().text("m", "fine").completed().turn()
    turns = [OPENING_STEPS[step] or answer for step in plan]
    client, transport, recorder = replay_client(turns)

    async def complete() -> Message:
        return await client.complete(HISTORY, ALL_TOOLS)

    try:
        asyncio.run(complete())
        succeeded = True
    except ResponseFailure:
        succeeded = False
    attempts = len(transport.requests)
    assert attempts <= 3
    # The expected attempts and waits follow from the plan alone.
    expected = 0
    for step in plan[:3]:
        expected += 1
        if step not in RETRYABLE_STEPS:
            break
    assert attempts == expected
    assert succeeded == (plan[expected - 1] == "ok")
    assert len(recorder.sleeps) == expected - 1
    for step, slept in zip(plan, recorder.sleeps, strict=False):
        if step == "503-after-1s":
            assert slept == 1.0  # the server's instruction wins over backoff
        else:
            assert 0 < slept < 1.0  # jittered backoff 0.25·2ⁿ
    assert len(transport.streams) == (1 if succeeded else 0)
