"""The judge: cassettes built from scripted replies (every protocol), through lockgate's own
client, unfaulted and faulted, and the lab's rules on what it must decide. Everything runs on
the virtual-time loop: a 5 s stall costs nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from lockgate.cassette.faults import Fault, fault_points, parse_fault
from lockgate.cassette.format import Cassette, Read, Verdict
from lockgate.cassette.judge import (
    Decision,
    Judgement,
    _faulted_problem,
    _plan,
    cassette_tools,
    judge,
    lab,
    run_virtual,
)
from lockgate.conversation import Message
from lockgate.fixture import ALL_TOOLS
from lockgate.providers import NAMES as ALL_NAMES
from lockgate.providers import provider as registry_entry
from lockgate.providers.base import CodecOptions
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import Turn, body_actions

# Cassettes hold SSE bodies; binary event-stream bodies (Bedrock) are later work (issue 29,
# part 6: cassettes record and replay Bedrock exchanges).
NAMES = tuple(name for name in ALL_NAMES if name != "bedrock")

HISTORY = (Message("user", "Fix the bug in add."),)
READ_ARGS = '{"path":"calculator.py"}'  # compact: Gemini sends an object, rendered so


def request_for(provider: str) -> Any:
    codec = registry_entry(provider).make_codec(CodecOptions("lab-model"))
    return codec.encode(HISTORY, ALL_TOOLS)


def scripted(
    provider: str,
    reply: Reply,
    *,
    verdict: Verdict | None = None,
    request: Any = None,
    name: str = "",
) -> Cassette:
    """A cassette of a scripted reply: the renderer's bytes, one read per fragment."""
    protocol = registry_entry(provider).render()
    pieces = [a for a in body_actions(Turn(reply=reply), protocol) if isinstance(a, bytes)]
    return Cassette(
        protocol=provider,
        base_url="http://127.0.0.1:9",
        method="POST",
        path="/scripted",
        request=request_for(provider) if request is None else request,
        status=200,
        headers=(("content-type", "text/event-stream"),),
        recorded_at="2026-01-01T00:00:00Z",
        reads=tuple(Read(0.001 * n, piece) for n, piece in enumerate(pieces)),
        verdict=verdict,
        source=name or f"{provider}-scripted.cassette.jsonl",
    )


def text_and_call(response_id: str = "resp_1") -> Reply:
    return Reply(
        response_id,
        (Say("I will read the file."), Call("call_1", "read", READ_ARGS)),
    )


def played(cassette: Cassette, faults: Sequence[Fault] = ()) -> Judgement:
    async def work() -> Judgement:
        return await judge(cassette, faults)

    result: Judgement = run_virtual(work)
    return result


@pytest.mark.parametrize("provider", NAMES)
def test_an_unfaulted_cassette_releases_exactly_its_reply(provider: str) -> None:
    result = played(scripted(provider, text_and_call()))
    assert result.accepted, result.detail
    assert result.decision == Decision("I will read the file.", "", (("read", READ_ARGS),))


@pytest.mark.parametrize("provider", NAMES)
def test_the_tools_are_the_recorded_requests_own(provider: str) -> None:
    cassette = scripted(provider, text_and_call())
    assert {tool.name for tool in cassette_tools(cassette)} == {t.name for t in ALL_TOOLS}
    bare = dict(request_for(provider))
    bare.pop("tools", None)
    result = played(scripted(provider, text_and_call(), request=bare))
    assert not result.accepted  # a call to a tool the request never declared
    assert result.decision is None


@pytest.mark.parametrize("provider", NAMES)
@pytest.mark.parametrize("spec", ["split:bytes=1", "split-utf8", "stall:before=2:seconds=0.5"])
def test_faults_that_must_not_matter_release_the_same_decision(provider: str, spec: str) -> None:
    cassette = scripted(provider, text_and_call())
    assert played(cassette, [parse_fault(spec)]) == played(cassette)


@pytest.mark.parametrize("provider", NAMES)
@pytest.mark.parametrize(
    ("spec", "kinds"),
    [
        ("stall:before=2:seconds=5", {"idle_timeout"}),
        ("reset:inside=2", {"transport"}),
        ("cut:inside=2", {"stream_ended"}),
        ("status:429:retry-after=1", {"opening", "quota_exhausted"}),
        ("status:503", {"opening"}),
    ],
)
def test_faults_that_break_the_body_are_refused(provider: str, spec: str, kinds: set[str]) -> None:
    result = played(scripted(provider, text_and_call()), [parse_fault(spec)])
    assert not result.accepted
    assert result.kind in kinds, (result.kind, result.detail)


@pytest.mark.parametrize("provider", NAMES)
def test_a_cut_anywhere_releases_nothing_or_exactly_the_reply(provider: str) -> None:
    """A cut after any event: refused, or (after the finish, e.g. a Chat body that ends
    without `[DONE]`) exactly the reply; a cut after the first event is always refused."""
    cassette = scripted(provider, text_and_call())
    whole = played(cassette)
    events = len(cassette.frames()[0])
    refused = 0
    for number in range(1, events + 1):
        for inside in (False, True):
            result = played(cassette, [Fault("cut", event=number, inside=inside)])
            refused += not result.accepted
            assert not result.accepted or result == whole, (number, inside, result)
    assert not played(cassette, [Fault("cut", event=1)]).accepted
    assert refused >= events  # every cut inside an event, at least


def test_the_rules_flag_a_different_release() -> None:
    cassette = scripted("responses", text_and_call())
    base = Judgement(True, "accepted", Decision("a", "", (("read", READ_ARGS),)))
    other = Judgement(True, "accepted", Decision("a", "", (("read", "{}"),)))
    refused = Judgement(False, "stream_ended")
    cut = Fault("cut", event=2)
    split = Fault("split", offset=1)
    drop = Fault("drop", event=2)
    assert _faulted_problem(cassette, cut, base, other, 1.0) is not None
    assert _faulted_problem(cassette, cut, base, refused, 1.0) is None  # may refuse
    assert _faulted_problem(cassette, cut, base, base, 1.0) is None
    assert _faulted_problem(cassette, split, base, refused, 1.0) is not None  # must not
    assert _faulted_problem(cassette, cut, refused, base, 1.0) is not None  # refused → release
    # A rewritten event list: a violation on Responses, undetectable where events carry no
    # numbers; a cut never is.
    found = _faulted_problem(cassette, drop, base, other, 1.0)
    assert found is not None
    assert found[1] is False
    chat = scripted("chat", text_and_call())
    found = _faulted_problem(chat, drop, base, other, 1.0)
    assert found is not None
    assert found[1] is True
    found = _faulted_problem(chat, cut, base, other, 1.0)
    assert found is not None
    assert found[1] is False


@pytest.mark.parametrize("provider", ["chat", "anthropic", "gemini"])
def test_a_dropped_content_event_can_change_an_unnumbered_release(provider: str) -> None:
    """Why `undetectable` exists: dropping one text event leaves a well-formed response
    that lockgate accepts, with less text (the lab counts it apart, never as accepted
    silently)."""
    cassette = scripted(provider, text_and_call())
    whole = played(cassette)
    changed = []
    for number in range(1, len(cassette.frames()[0]) + 1):
        result = played(cassette, [Fault("drop", event=number)])
        if result.accepted and result != whole:
            changed.append(number)
    assert changed
    row = lab([cassette]).rows[0]
    assert not row.violations
    assert {v.fault for v in row.undetectable} >= {f"drop:{n}" for n in changed}


def test_a_lab_over_every_fault_point_of_a_responses_cassette_has_no_violation() -> None:
    cassette = scripted("responses", text_and_call(), verdict=Verdict("accepted", None, 1))
    report = lab([cassette])
    (row,) = report.rows
    assert row.runs == 1 + len(fault_points(cassette))
    assert row.accepted >= 1
    assert row.refused >= 1
    assert report.violations == (), report.violations


@pytest.mark.parametrize(
    ("verdict", "wanted"),
    [
        (Verdict("accepted", None, 1), None),
        (Verdict("accepted", None, 2), "accepted 2 call(s); lockgate now releases 1"),
        (Verdict("refused", "stream_ended", 1), "the recorded verdict refused"),
    ],
)
def test_the_unfaulted_run_must_reproduce_the_recorded_verdict(
    verdict: Verdict, wanted: str | None
) -> None:
    report = lab([scripted("chat", text_and_call(), verdict=verdict)], budget=1)
    unfaulted = [v for v in report.violations if v.fault is None]
    if wanted is None:
        assert not unfaulted
    else:
        assert len(unfaulted) == 1
        assert wanted in unfaulted[0].reason


def test_a_refused_verdict_of_a_refused_run_is_reproduced() -> None:
    cut = Reply("resp_2", (Call("call_1", "read", READ_ARGS, cut=True),), ending="open")
    cassette = scripted("anthropic", cut, verdict=Verdict("refused", None, 1))
    assert not played(cassette).accepted
    assert not [v for v in lab([cassette], budget=3).violations if v.fault is None]


def test_a_budget_is_a_seeded_draw_over_every_cassette() -> None:
    cassettes = [scripted(p, text_and_call()) for p in ("responses", "chat")]
    total = sum(len(fault_points(c)) for c in cassettes)
    plan = _plan(cassettes, 10, 7)
    assert sum(len(p) for p in plan) == 10
    assert plan == _plan(cassettes, 10, 7)
    assert plan != _plan(cassettes, 10, 8)
    assert [len(p) for p in _plan(cassettes, None, 7)] == [len(fault_points(c)) for c in cassettes]
    assert sum(len(p) for p in _plan(cassettes, total + 5, 7)) == total
    for faults, cassette in zip(plan, cassettes, strict=True):
        assert all(fault in fault_points(cassette) for fault in faults)
