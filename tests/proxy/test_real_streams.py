"""Real recorded traffic through the gating engine (`../shared/real-streams/`, never copied
here): every recording of a protocol with a gateway (Responses, Chat Completions, Anthropic
Messages, Gemini; not Bedrock) is fed to `GatingStream` whole and in two seeded random
splits (the recordings keep no read boundaries), with the request's own tools and schemas
(validated, the engine's default; Gemini's OpenAPI-subset `parameters` as the JSON Schema
they mean).

The verdict must be the conformance test's (`tests/providers/test_conformance.py`): a
complete, successful recording is accepted, unless it is one lockgate refuses on purpose
(`JUSTIFIED`, with that failure); every other is refused, as one of the failures its
recorded finish calls for, and as the same failure `lockgate run`'s client reaches on the
same bytes. An accepted one is passed byte for byte (output == recorded body) and its
decision releases exactly what the recording states; a refused one ends with the
protocol's error, and no tool event reaches the client. An accepted Gemini recording is
re-framed (its CRLF line ends become LF: the canonical form), so it is compared event for
event, not byte for byte. A recording with an HTTP error status is not gated (`gates`): it
passes as it came. The table of outcomes per protocol is printed (run with `-s`, or see the
test's output).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from lockgate.gateway import ProtocolTarget
from lockgate.providers import provider as registry_entry
from lockgate.proxy import Accepted, GatingOptions, Refused, gates

from ..helpers import ROOT
from .support import (
    as_released,
    ends_with_refusal,
    gate_stream,
    keepalive_count,
    not_canonical,
    options,
    run,
    tool_events,
    without_keepalives,
)

CORPUS = ROOT.parent / "shared" / "real-streams"
if not CORPUS.is_dir():
    pytest.skip(
        f"no real recordings at {CORPUS} (they live beside the project in the development "
        "workspace, not in a clone)",
        allow_module_level=True,
    )

# The conformance test's own rules (imported after the skip: that module skips itself too).
from ..providers.test_conformance import (  # noqa: E402
    EXPECTED_FAILURES,
    JUSTIFIED,
    _disagreement,
    _function_tools,
    _play,
    _success,
)

GATED = ("responses", "chat", "anthropic", "gemini")  # the protocols with a gateway
# What a recording's request path said: Gemini's every recording is `:streamGenerateContent
# ?alt=sse` (its path asks for the stream); the others' bodies say it.
TARGETS = {"gemini": ProtocolTarget(stream=True)}
SPLITS = ("whole", "1-64", "1-4096")
# Recordings `lockgate run` refuses on purpose that the engine accepts in front of a client:
# file -> why. The client's own request declares what it executes itself.
CLIENT_EXECUTED: dict[str, str] = {
    "responses-pydantic-ai-1.json": (
        "its request declares tool_search with execution: client, so the client that sent it "
        "executes the tool_search_call; lockgate run has no executor for it and refuses"
    ),
}


def _recordings() -> list[Path]:
    return sorted(path for path in CORPUS.glob("*.json") if path.name.split("-", 1)[0] in GATED)


RECORDINGS = _recordings()


def _load(path: Path) -> dict[str, Any]:
    recording: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return recording


def _pieces(body: bytes, split: str, seed: str) -> list[bytes]:
    if split == "whole":
        return [body]
    low, high = (int(part) for part in split.split("-"))
    rng = random.Random(f"{seed}/{split}")
    pieces, position = [], 0
    while position < len(body):
        size = rng.randint(low, high)
        pieces.append(body[position : position + size])
        position += size
    return pieces


class _Reads:
    """The recorded body in given reads, then a clean end."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces
        self.closed = False

    async def __aiter__(self) -> Any:
        for piece in self.pieces:
            yield piece

    async def aclose(self) -> None:
        self.closed = True


def _expected(recording: Mapping[str, Any], name: str) -> tuple[bool, set[str]]:
    """The conformance test's verdict: accepted, or the failure kinds it may be refused as."""
    if _success(recording):
        if name in JUSTIFIED and name not in CLIENT_EXECUTED:
            return False, {JUSTIFIED[name][0]}
        return True, set()
    return False, set(EXPECTED_FAILURES.get(recording["expect"]["finish"], set()))


async def _oracle(recording: Mapping[str, Any]) -> str:
    """What `lockgate run`'s client makes of the whole body: `accepted` or the failure."""
    tools, _ = _function_tools(recording["protocol"], recording.get("request"))
    outcome = await _play(recording, tools, None)
    return "accepted" if outcome.released is not None else outcome.failure


def _gating() -> GatingOptions:
    # The recording's own schemas are checked (as the conformance test's ToolSpecs do);
    # the keep-alive interval is far beyond any read here, so that output == input exactly.
    return options(validate_schemas=True, keepalive_interval=3600.0, deadline=3600.0)


async def _check(path: Path) -> tuple[str, list[str]]:
    """(the outcome row: `accepted`, `refused:<kind>`, `error status`; the problems)."""
    recording = _load(path)
    provider = recording["protocol"]
    name = path.name
    request: dict[str, Any] = recording.get("request") or {}
    entry = registry_entry(provider)
    assert entry.gateway is not None
    gateway = entry.gateway()
    status = int(recording["status"])
    target = TARGETS.get(provider, ProtocolTarget())
    if status >= 400:
        if gates(gateway, request, status, target):
            return "error status", [f"{name}: an HTTP {status} would be gated"]
        return "error status", []
    problems: list[str] = []
    accept, kinds = _expected(recording, name)
    oracle = await _oracle(recording)
    if name in CLIENT_EXECUTED:
        if oracle != JUSTIFIED[name][0]:
            problems.append(f"{name}: lockgate run should refuse it as {JUSTIFIED[name][0]}")
    elif (oracle == "accepted") != accept:
        problems.append(f"{name}: the conformance rules say accept={accept}, the client {oracle}")
    body = recording["body"].encode("utf-8")
    rows: set[str] = set()
    for split in SPLITS:
        where = f"{name} ({split})"
        upstream = _Reads(_pieces(body, split, name))
        gated = await gate_stream(provider, request, upstream, _gating())
        outcome = gated.outcome
        if not upstream.closed:
            problems.append(f"{where}: the upstream was not closed")
        if isinstance(outcome, Accepted):
            rows.add("accepted")
            if not accept:
                problems.append(f"{where}: RELEASED WRONGLY (expected a refusal: {kinds})")
                continue
            # Every event the recording's, in order, in the canonical form; keep-alives
            # (comments become the gateway's own; Anthropic's `ping`) pass at once while
            # frames are held, so they may come earlier.
            if gated.output != body:
                rows.add("accepted (re-framed)")
            if not_canonical(gated.output, gated.gateway):
                problems.append(f"{where}: the output is not canonical")
            if without_keepalives(gated.output, gated.gateway) != as_released(
                without_keepalives(body, gated.gateway), provider
            ):
                problems.append(f"{where}: the accepted stream's events changed")
            if keepalive_count(gated.output, gated.gateway) != keepalive_count(body, gated.gateway):
                problems.append(f"{where}: keep-alives were lost or added")
            disagreement = _disagreement(recording, outcome.decision.message)
            if name in CLIENT_EXECUTED:
                # The recording states no function call; the one released is the client's.
                names = [call.name for call in outcome.decision.message.tool_calls]
                disagreement = "" if names == ["tool_search_call"] else f"released {names}"
            if disagreement:
                problems.append(f"{where}: the decision disagrees: {disagreement}")
            continue
        assert isinstance(outcome, Refused)
        kind = outcome.refusal.kind
        rows.add(f"refused:{kind}")
        if accept:
            problems.append(f"{where}: refused as {kind}: {outcome.refusal.message}")
            continue
        if kind not in kinds:
            problems.append(f"{where}: refused as {kind}, not one of {sorted(kinds)}")
        if kind != oracle:
            problems.append(f"{where}: refused as {kind}, lockgate run: {oracle}")
        if not ends_with_refusal(gated.output, provider):
            problems.append(f"{where}: the output does not end with the protocol's error")
        if tool_events(gated.output):
            problems.append(f"{where}: a tool event reached the client")
        forwarded = without_keepalives(gated.output[: -len(gated.pieces[-1])], gated.gateway)
        if forwarded != without_keepalives(body, gated.gateway)[: len(forwarded)]:
            problems.append(f"{where}: what was forwarded is not the recording's beginning")
    outcomes = {row.split(" ")[0] for row in rows}
    if len(outcomes) != 1:
        problems.append(f"{name}: the split changed the outcome: {sorted(rows)}")
    return max(rows, key=len), problems


@pytest.mark.parametrize("path", RECORDINGS, ids=[path.name for path in RECORDINGS])
def test_the_engine_reaches_the_conformance_verdict(path: Path) -> None:
    _, problems = run(_check(path))
    assert problems == []


def test_the_recordings_cover_every_gated_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    # The test above cannot pass vacuously: every gated protocol has recordings, and both
    # accepted and refused ones. The counts are printed.
    async def tally() -> Counter[tuple[str, str]]:
        rows: Counter[tuple[str, str]] = Counter()
        for path in RECORDINGS:
            row, _ = await _check(path)
            rows[(path.name.split("-", 1)[0], row)] += 1
        return rows

    rows = run(tally())
    with capsys.disabled():
        print("\nreal recordings through the gating engine (protocol / outcome: count)")
        for (protocol, row), count in sorted(rows.items()):
            print(f"  {protocol:<9} {row:<32} {count}")
    assert sum(rows.values()) == len(RECORDINGS)
    for protocol in GATED:
        accepted = sum(n for (p, row), n in rows.items() if p == protocol and "accepted" in row)
        assert accepted > 10, protocol
        assert sum(n for (p, row), n in rows.items() if p == protocol and "refused" in row), (
            protocol
        )
