"""Differential with the real readers: mutated real recordings through `lockgate proxy` (in
process, on loopback) and through the transport (`gated_client()`), read by the installed
openai, anthropic, google-genai and litellm libraries (`real_readers/`).

    .venv/bin/python -m tests.proxy.real_differential --budget N --seed S [--corpus DIR]
        [--show K] [--save DIR] [--whole]

Each of the N cases takes a recording of a gated protocol (a 2xx answer, from
`../shared/real-streams`, never copied here) and, at random: leaves it whole (15%: it is
then also read directly, from the upstream, and every reading through the gate of a stream
the gate accepts must be the direct one: text, call ids, argument bytes, unless the direct
one raised and the gate's did not), applies one
shape mutation (`real_mutations.SHAPES`, 45%), or one to three framing mutations
(`differential.MUTATIONS`). The loopback upstream serves the bytes to every request; each
reader of the protocol reads them through the proxy and through the transport; the gate's
decision is the engine's on the same bytes for the request the reader sent.

A finding: a reader ends with (or holds when it raised) a call of a refused stream, or a
call whose id, name or arguments are not those of a call the gate released, or released
arguments that are not strict JSON; or a whole recording the gate accepts read otherwise
through it than directly. Findings of a mutation in `real_mutations.KNOWN` are known (being
fixed elsewhere), every other is new.

It prints the totals (cases, reads per reader, accepted, refused, findings per reader and
per mutation, known and new) and the first findings, and exits 1 if there is any finding,
0 otherwise; with no recordings it says so and exits 0. `--whole`: instead, every recording
once, unmutated (each read directly too). `--save DIR` writes each finding's
bytes and request (`<case>-<reader>-<route>.json`) to reproduce it. Bad arguments: one line
and exit 2.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockgate.conversation import ToolCall
from lockgate.proxy import GatingOptions
from lockgate.proxy.server import ProxyRecord

from . import real_readers
from .differential import MUTATIONS, Arguments, Recording, recordings_or_exit, report_head
from .real_mutations import KNOWN, SHAPES
from .real_readers import READERS, Read, findings, loopback_only, released_calls
from .support import options

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_SEED",
    "Case",
    "Finding",
    "Totals",
    "differential",
    "main",
    "run_cases",
    "shaped",
]

DEFAULT_BUDGET = 60
DEFAULT_SEED = 27
WHOLE = "whole"


@dataclass(frozen=True, slots=True)
class Case:
    number: int
    recording: Recording
    mutations: tuple[str, ...]  # () for a whole recording
    body: bytes
    request: dict[str, Any]
    variant: str = ""  # a shape mutation's variant

    @property
    def label(self) -> str:
        label = " + ".join(self.mutations) or WHOLE
        return f"{label}: {self.variant}" if self.variant else label


@dataclass(frozen=True, slots=True)
class Finding:
    case: int
    recording: str
    mutation: str
    known: str | None  # the fix it waits for (None: new)
    reader: str
    route: str
    what: str
    body: bytes
    request: Mapping[str, Any]

    def line(self) -> str:
        tag = "known" if self.known else "NEW"
        return (
            f"{tag}: case {self.case} {self.recording} [{self.mutation}] "
            f"{self.reader} via {self.route}: {self.what}"
        )


@dataclass(slots=True)
class Totals:
    seed: int = 0
    budget: int = 0
    cases: int = 0
    reads: Counter[str] = field(default_factory=Counter)  # per reader
    raised: Counter[str] = field(default_factory=Counter)  # per reader, on accepted streams
    accepted: int = 0
    refused: int = 0
    by_mutation: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # a mutation or a run that raised
    cpu: float = 0.0
    wall: float = 0.0

    @property
    def known(self) -> list[Finding]:
        return [finding for finding in self.findings if finding.known]

    @property
    def new(self) -> list[Finding]:
        return [finding for finding in self.findings if not finding.known]


def _cases(
    recordings: Sequence[Recording], budget: int, seed: int, totals: Totals
) -> Iterator[Case]:
    """The cases: a whole recording (15%), one shape mutation (45%; the shapes in turn, each
    on a recording it applies to, so that a short run has every one), or one to three
    framing mutations."""
    rng = random.Random(seed)
    framing = sorted(MUTATIONS)
    shapes = sorted(SHAPES)
    turn = rng.randrange(len(shapes))
    number = 0
    while number < budget:
        recording = rng.choice(recordings)
        body, request = recording.body, dict(recording.request)
        roll = rng.random()
        applied: list[str] = []
        variant = ""
        try:
            if roll < 0.15:
                pass
            elif roll < 0.6:
                name = shapes[turn % len(shapes)]
                turn += 1
                for _ in range(40):  # a recording the shape applies to
                    recording = rng.choice(recordings)
                    result = SHAPES[name](
                        rng, recording.protocol, recording.body, request_of(recording)
                    )
                    if result is not None:
                        body, request, variant = result
                        applied.append(name)
                        break
                if not applied:
                    continue
            else:
                for _ in range(rng.choice([1, 1, 2, 3])):
                    name = rng.choice(framing)
                    mutated = MUTATIONS[name](rng, recording.protocol, body)
                    if mutated is not None:
                        body = mutated
                        applied.append(name)
                if not applied:
                    continue
        except Exception as exc:  # a bug of the mutation's own: reported
            number += 1
            totals.errors.append(f"case {number}: {recording.name}: a mutation raised {exc!r}")
            continue
        number += 1
        yield Case(number, recording, tuple(applied), body, request, variant)


def request_of(recording: Recording) -> dict[str, Any]:
    """A copy of the recording's request (a mutation may change its copy)."""
    copied: dict[str, Any] = json.loads(json.dumps(recording.request))
    return copied


def _known(case: Case) -> str | None:
    for name in case.mutations:
        if name in KNOWN:
            return KNOWN[name]
    return None


def _same_read(direct: Read, gated: Read) -> str | None:
    """How a reading through the gate differs from the direct one (None: it does not). A
    reader that raised on the upstream's bytes and reads the gate's without raising reads
    the canonical form the gate releases (Chat's index-less calls given their index:
    docs/wire/chat.md §5); what it read is checked against the released calls apart
    (`findings`)."""
    if direct.raised is not None and gated.raised is None:
        return None
    if gated.text != direct.text:
        return f"text {gated.text[:60]!r}, directly {direct.text[:60]!r}"

    def calls(read: Read) -> list[tuple[object, ...]]:
        return [
            (call.id, call.name, call.arguments if call.arguments is not None else repr(call.value))
            for call in read.calls
        ]

    if calls(gated) != calls(direct):
        return f"calls {calls(gated)}, directly {calls(direct)}"
    if (gated.raised is None) != (direct.raised is None):
        return f"raised {gated.raised!r}, directly {direct.raised!r}"
    return None


async def _run_case(
    case: Case,
    upstream: real_readers.Upstream,
    proxy: Any,
    gating: GatingOptions,
    totals: Totals,
    decisions: dict[tuple[str, bytes], tuple[ToolCall, ...] | None],
) -> None:
    protocol = case.recording.protocol
    upstream.body = case.body
    accepted: bool | None = None
    for reader in READERS:
        if reader.protocol != protocol:
            continue
        routes = [route for route in reader.routes if route != "direct"]
        if not case.mutations and "direct" in reader.routes:
            routes = ["direct", *routes]
        direct: Read | None = None
        for route in routes:
            upstream.requests.clear()
            got = await real_readers.read(reader, case.request, route, upstream, proxy, gating)
            totals.reads[reader.name] += 1
            if route == "direct":
                direct = got
                continue
            sent = upstream.requests[0][1] if upstream.requests else dict(case.request)
            key = (json.dumps(sent, sort_keys=True), case.body)
            if key not in decisions:
                decisions[key] = await released_calls(protocol, sent, case.body, gating)
            released = decisions[key]
            accepted = released is not None
            if accepted and got.raised is not None:
                totals.raised[reader.name] += 1
            found = findings(got, released, sent)
            if direct is not None and released is not None:
                differs = _same_read(direct, got)
                if differs is not None:
                    found.append(f"read otherwise than directly: {differs}")
            for what in found:
                totals.findings.append(
                    Finding(
                        case.number,
                        case.recording.name,
                        case.label,
                        _known(case),
                        reader.name,
                        route,
                        what,
                        case.body,
                        sent,
                    )
                )
    if accepted is True:
        totals.accepted += 1
    elif accepted is False:
        totals.refused += 1


async def _differential(cases: Iterable[Case], totals: Totals, gating: GatingOptions) -> None:
    records: list[ProxyRecord] = []
    decisions: dict[tuple[str, bytes], tuple[ToolCall, ...] | None] = {}
    async with real_readers.upstream_and_proxy(gating, records.append) as (upstream, proxy):
        for case in cases:
            totals.cases += 1
            totals.by_mutation[case.label if not case.mutations else case.mutations[0]] += 1
            for name in case.mutations[1:]:
                totals.by_mutation[name] += 1
            try:
                await asyncio.wait_for(
                    _run_case(case, upstream, proxy, gating, totals, decisions), 120
                )
            except Exception as exc:
                totals.errors.append(
                    f"case {case.number}: {case.recording.name} [{case.label}]: {exc!r}"
                )


def gating_options() -> GatingOptions:
    # Time never runs out here (the keep-alive interval too: what passes is the upstream's).
    return options(
        validate_schemas=True, idle_timeout=60.0, deadline=600.0, keepalive_interval=3600.0
    )


def run_cases(cases: Callable[[Totals], Iterable[Case]], totals: Totals) -> Totals:
    """Run the cases (`cases(totals)`; on a loop of their own, loopback only)."""
    started, cpu = time.monotonic(), time.process_time()
    refused = len(real_readers.REFUSED)
    with loopback_only():
        asyncio.run(_differential(cases(totals), totals, gating_options()))
    for attempt in real_readers.REFUSED[refused:]:
        totals.errors.append(f"beyond loopback, refused: {attempt}")
    totals.wall = time.monotonic() - started
    totals.cpu = time.process_time() - cpu
    return totals


def differential(
    recordings: Sequence[Recording], budget: int = DEFAULT_BUDGET, seed: int = DEFAULT_SEED
) -> Totals:
    """Run `budget` cases from `seed`."""
    return run_cases(
        lambda totals: _cases(recordings, budget, seed, totals), Totals(seed=seed, budget=budget)
    )


def _whole(recordings: Sequence[Recording]) -> Iterator[Case]:
    for number, recording in enumerate(recordings, 1):
        yield Case(number, recording, (), recording.body, request_of(recording))


def shaped(recording: Recording, shape: str, seed: int, number: int = 1) -> Case:
    """One case: the shape mutation `shape` on `recording`, from `seed` (a pinned case)."""
    rng = random.Random(f"{recording.name}/{shape}/{seed}")
    result = SHAPES[shape](rng, recording.protocol, recording.body, request_of(recording))
    if result is None:
        raise ValueError(f"{shape} does not apply to {recording.name}")
    return Case(number, recording, (shape,), *result)


def report(totals: Totals, recordings: Sequence[Recording], show: int = 10) -> list[str]:
    lines = [
        *report_head("real-reader differential", totals.seed, totals.budget, recordings),
        f"cases: {totals.cases} (accepted {totals.accepted}, refused {totals.refused})",
        f"time: {totals.wall:.1f} s wall, {totals.cpu:.1f} s CPU",
        "reads per reader (raised on a stream the gate accepted; findings known, new):",
    ]
    for reader in READERS:
        known = sum(1 for f in totals.known if f.reader == reader.name)
        new = sum(1 for f in totals.new if f.reader == reader.name)
        lines.append(
            f"  {reader.name}: {totals.reads[reader.name]} ({totals.raised[reader.name]};"
            f" {known}, {new})"
        )
    lines.append("per mutation (cases; findings known, new):")
    for name in [WHOLE, *sorted(SHAPES), *sorted(MUTATIONS)]:
        known = sum(1 for f in totals.known if name in _names(f.mutation))
        new = sum(1 for f in totals.new if name in _names(f.mutation))
        lines.append(f"  {name}: {totals.by_mutation[name]}; {known}, {new}")
    lines.append(
        f"findings: {len(totals.findings)} (known {len(totals.known)}, new {len(totals.new)})"
    )
    for error in totals.errors:
        lines.append(f"error: {error}")
    shown = totals.new[:show] + totals.known[: max(0, show - len(totals.new))]
    lines.extend(finding.line() for finding in shown)
    return lines


def _names(label: str) -> list[str]:
    return label.split(": ", 1)[0].split(" + ")


def save(totals: Totals, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for finding in totals.findings:
        name = f"{finding.case:05d}-{finding.reader}-{finding.route}.json"
        (folder / name).write_text(
            json.dumps(
                {
                    "recording": finding.recording,
                    "mutation": finding.mutation,
                    "known": finding.known,
                    "what": finding.what,
                    "request": finding.request,
                    "body": finding.body.decode("utf-8", "backslashreplace"),
                },
                indent=1,
            ),
            encoding="utf-8",
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = Arguments(
        prog="python -m tests.proxy.real_differential",
        description="Mutated real streams through the proxy and the transport, read by the "
        "real Python libraries.",
    )
    parser.common(DEFAULT_BUDGET, DEFAULT_SEED, 10, "cases to run", "findings")
    parser.add_argument("--save", type=Path, default=None, help="write each finding here")
    parser.add_argument(
        "--whole",
        action="store_true",
        help="instead: every recording once, unmutated, read directly and through the gate",
    )
    args = parser.parse_args(argv)
    if args.budget < 0 or args.show < 0:
        parser.error("--budget and --show must not be negative")
    recordings = recordings_or_exit(
        args.corpus, lambda: None if real_readers.litellm_available() else "litellm"
    )
    if isinstance(recordings, int):
        return recordings
    warnings.filterwarnings("ignore", real_readers.LITELLM_WARNING, UserWarning)
    if args.whole:
        totals = run_cases(lambda _: _whole(recordings), Totals(budget=len(recordings)))
    else:
        totals = differential(recordings, args.budget, args.seed)
    for line in report(totals, recordings, args.show):
        print(line)
    if args.save is not None:
        save(totals, args.save)
    return 1 if totals.findings or totals.errors else 0


if __name__ == "__main__":
    sys.exit(main())
