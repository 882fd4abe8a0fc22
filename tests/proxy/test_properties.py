"""A property, on every protocol: for generated replies (text, reasoning, refusals, valid and
invalid calls, every ending), line ends, keep-alives, reads cut anywhere and the body cut
or reset anywhere, the engine decides as `lockgate run` does on the same bytes; an accepted
stream comes out byte for byte, a refused one carries no tool event and ends in the
protocol's error."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate.providers import provider as registry_entry
from lockgate.proxy import Accepted
from lockgate.scripted.reply import Call, Part, Refuse, Reply, Say, Think
from lockgate.scripted.scenario import EDIT_FIX
from lockgate.sse import SSEDecoder

from .support import (
    PROTOCOLS,
    Chunks,
    Gated,
    Verdict,
    ends_with_refusal,
    gate_stream,
    keepalive_count,
    not_canonical,
    oracle_chunks,
    request_for,
    run,
    tool_events,
    without_keepalives,
)

_ARGUMENTS: st.SearchStrategy[str | Mapping[str, Any]] = st.sampled_from(
    [
        EDIT_FIX,
        {},
        {"path": "README.md"},
        {"path": "calculator.py", "old": "a - b"},  # `new` missing
        '{"path": "calculator.py", "old": "return a - b", "new": "return a +',  # cut JSON
        "[1, 2]",
        {"command": "rm -rf ."},
    ]
)
_NAMES = st.sampled_from(["edit", "read", "discover", "test", "shell"])
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=24)


@st.composite
def replies(draw: st.DrawFn) -> Reply:
    parts: list[Part] = []
    calls = 0
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["say", "say", "think", "call", "call", "refuse"]))
        if kind == "say":
            parts.append(Say(draw(_TEXT), draw(st.integers(1, 5))))
        elif kind == "think":
            parts.append(Think(draw(_TEXT)))
        elif kind == "refuse":
            parts.append(Refuse(draw(_TEXT)))
        else:
            calls += 1
            parts.append(
                Call(f"call_{calls}", draw(_NAMES), draw(_ARGUMENTS), draw(st.integers(1, 6)))
            )
    ending = draw(
        st.sampled_from(["complete", "complete", "complete", "truncated", "error", "open"])
    )
    return Reply("resp_prop", tuple(parts), ending)  # type: ignore[arg-type]


@st.composite
def bodies(draw: st.DrawFn, provider: str) -> tuple[list[bytes], bool, bool]:
    """(reads, reset at the end, keep-alive comments inserted)."""
    renderer = registry_entry(provider).render()
    reply = draw(replies())
    frames = [renderer.frame(event) for event in renderer.events(reply)]
    comments = draw(st.booleans())
    if comments:
        at = draw(st.lists(st.integers(0, len(frames)), max_size=3))
        for index in sorted(at, reverse=True):
            frames.insert(index, b": keep-alive\n\n")
    # LF line ends first (Gemini frames its events with CRLF), then the ones drawn.
    body = b"".join(frames).replace(b"\r\n", b"\n")
    line_end = draw(st.sampled_from([b"\n", b"\n", b"\r\n", b"\r"]))
    if line_end != b"\n":
        body = body.replace(b"\n", line_end)
    ending = draw(st.sampled_from(["whole", "whole", "cut", "reset"]))
    if ending != "whole":
        body = body[: draw(st.integers(0, len(body)))]
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=8)))
    bounds = [0, *cuts, len(body)]
    reads = [body[a:b] for a, b in itertools.pairwise(bounds)]
    return reads, ending == "reset", comments


@pytest.mark.parametrize("provider", PROTOCOLS)
@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_the_engine_passes_what_lockgate_run_accepts_and_refuses_the_rest(
    provider: str, data: st.DataObject
) -> None:
    reads, reset, _ = data.draw(bodies(provider))
    body = b"".join(reads)
    request = request_for(provider, model="m")

    async def both() -> tuple[Verdict, Gated]:
        verdict = await oracle_chunks(provider, reads, reset=reset)
        gated = await gate_stream(provider, request, Chunks(reads, reset=reset))
        return verdict, gated

    verdict, gated = run(both())
    outcome = gated.outcome
    assert verdict.accepted == isinstance(outcome, Accepted), (verdict, outcome)
    if isinstance(outcome, Accepted):
        # The client reads the upstream's events, every one in the canonical form; an
        # upstream keep-alive (a comment: the gateway's own; Anthropic's `ping`) passes at
        # once, before the frames held around it, none lost. A body already canonical and
        # without keep-alives passes byte for byte.
        assert not_canonical(gated.output, gated.gateway) == []
        assert without_keepalives(gated.output, gated.gateway) == without_keepalives(
            body, gated.gateway
        )
        assert keepalive_count(gated.output, gated.gateway) == keepalive_count(body, gated.gateway)
        if not keepalive_count(body, gated.gateway) and not not_canonical(body, gated.gateway):
            assert gated.output == body
        return
    assert outcome.refusal.kind == verdict.kind
    assert tool_events(gated.output) == []
    assert ends_with_refusal(gated.output, provider)
    error = json.loads(SSEDecoder().feed(gated.pieces[-1])[0].data)["error"]
    assert error["message"].startswith("lockgate ")
