"""Judging what the readers read against what the gate released on the same bytes: lockgate's
own engine decides each proxied read's stream (with the request the upstream received, the
proxy's default gating); a call a reader ended with, executed, or held when it raised that
the gate did not release is a finding, classed by `KNOWN` or NEW; so are a released custom
call outside its tool's regex grammar and an unmutated recording read otherwise through the
proxy than directly. The proxy's log is checked against the engine's decisions.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.proxy.real_mutations import SHAPES, custom_grammar_violation
from tests.proxy.support import gate_stream, run

from lockgate.conversation import ToolCall
from lockgate.proxy import Accepted, GatingOptions

from .cases import KNOWN, NEW, UNMUTATED, Case, Job, Served, is_labelled, jobs_for

__all__ = ["DIRECT", "GRAMMAR", "Finding", "Totals", "judge"]

GRAMMAR = "custom tool grammar not checked"
DIRECT = "unmutated: read otherwise through the proxy than directly"


class _Reads:
    def __init__(self, body: bytes) -> None:
        self.body = body

    async def __aiter__(self) -> Any:
        yield self.body

    async def aclose(self) -> None:
        pass


GATING = GatingOptions(
    validate_schemas=True, idle_timeout=3600.0, deadline=3600.0, keepalive_interval=3600.0
)


async def _decide(
    protocol: str, request: dict[str, Any], body: bytes
) -> tuple[str, tuple[ToolCall, ...] | None]:
    try:
        gated = await gate_stream(protocol, request, _Reads(body), GATING)
    except Exception as exc:  # the engine refuses, it never raises: a bug, shown
        return f"raised {exc!r}", None
    if isinstance(gated.outcome, Accepted):
        return "passed", gated.outcome.decision.message.tool_calls
    return ("withheld" if gated.outcome.refusal.withheld else "refused"), None


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True, allow_nan=True)


def _reader_value(call: dict[str, Any]) -> object:
    text = call.get("arguments")
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return ("not JSON", text)


def matches(call: dict[str, Any], released: ToolCall) -> bool:
    if call.get("name") != released.name:
        return False
    if call.get("kind") == "custom":
        return call.get("raw") == released.arguments_json
    return _canonical(_reader_value(call)) == _canonical(released.arguments)


def describe_call(call: dict[str, Any]) -> str:
    namespace = f"{call['namespace']}." if call.get("namespace") else ""
    shown = call.get("raw") if call.get("kind") == "custom" else call.get("arguments")
    return f"{namespace}{call.get('name')}({_short(str(shown))})"


def describe_released(call: ToolCall) -> str:
    return f"{call.name}({_short(call.arguments_json or _canonical(call.arguments))})"


def _short(text: str, limit: int = 160) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def classify(case: Case, reader: str) -> str:
    for kind, names, readers in KNOWN:
        if reader in readers and any(is_labelled(label, n) for label in case.labels for n in names):
            return f"known: {kind}"
    suspects = [label for label in case.labels if label.split(": ")[0] in SHAPES]
    suspects = suspects or list(case.labels)
    return f"{NEW} ({' + '.join(suspects) or UNMUTATED})"


@dataclass(slots=True)
class Finding:
    case: Case
    reader: str
    kind: str
    text: str


@dataclass(slots=True)
class Totals:
    cases: int = 0
    jobs: int = 0
    read: int = 0  # jobs with a result line
    decisions: Counter[str] = field(default_factory=Counter)
    reader_errors: Counter[str] = field(default_factory=Counter)
    by_mutation: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    log_mismatches: list[str] = field(default_factory=list)
    released: dict[str, str] = field(default_factory=dict)  # per proxy read: the decision
    missed: Counter[str] = field(default_factory=Counter)  # per reader: released calls not read
    missed_by_mutation: Counter[tuple[str, str]] = field(default_factory=Counter)  # reads
    refused_reads: Counter[str] = field(default_factory=Counter)  # per reader
    silent_refusals: Counter[str] = field(default_factory=Counter)  # refused, read without error


def _proxy_outcomes(lines: Sequence[str]) -> list[str]:
    found = []
    for line in lines:
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("event") == "request":
                found.append(str(record.get("outcome")))
    return found


def judge(cases: Sequence[Case], served: Served) -> Totals:
    totals = Totals(cases=len(cases))
    decided: list[tuple[str, str]] = []  # (case and reader, the engine's decision)
    for case in cases:
        for name in case.labels or (UNMUTATED,):
            totals.by_mutation[name] += 1
        for job in jobs_for(case):
            totals.jobs += 1
            result = served.results.get(job.model)
            if result is None:
                continue
            totals.read += 1
            if result.get("error"):
                totals.reader_errors[job.reader] += 1
            if job.path != "proxy":
                continue
            request = served.requests.get(job.model)
            if request is None:
                continue  # the reader sent nothing (it raised before): nothing to compare
            outcome, released = run(_decide(case.recording.protocol, request, case.body))
            decided.append((f"case {case.number} {job.reader}", outcome))
            totals.released[job.model] = outcome + (
                "" if released is None else ": " + ", ".join(describe_released(c) for c in released)
            )
            totals.decisions[outcome] += 1
            _compare(totals, case, job, result, request, released, outcome)
            if not case.labels and released is not None:
                _compare_direct(
                    totals,
                    case,
                    job,
                    result,
                    served.results.get(Job(job.case, job.reader, "direct").model),
                )
    # node reads one case after another, so the proxy logs the requests in the order they
    # were sent; those it rejected before going upstream never reached the upstream.
    logged = [o for o in _proxy_outcomes(served.proxy_log) if o != "rejected"]
    if len(logged) == len(decided):
        for (label, outcome), proxy_said in zip(decided, logged, strict=True):
            if outcome != proxy_said:
                totals.log_mismatches.append(
                    f"{label}: the proxy logged {proxy_said}, the engine decided {outcome}"
                )
    else:
        totals.log_mismatches.append(
            f"the proxy logged {len(logged)} judged requests, the upstream saw {len(decided)}: "
            f"{dict(Counter(logged))} against {dict(Counter(o for _, o in decided))}"
        )
    return totals


def _compare(
    totals: Totals,
    case: Case,
    job: Job,
    result: dict[str, Any],
    request: dict[str, Any],
    released: tuple[ToolCall, ...] | None,
    outcome: str,
) -> None:
    wrong: list[str] = []
    grammar: list[str] = []
    # What a reader held when it raised counts only in a refused stream (any call there is
    # one the gate withheld); in an accepted one it is a partial state no client acts on.
    wheres = ("calls", "executed") if released is not None else ("calls", "executed", "seen")
    for where in wheres:
        for call in result.get(where) or []:
            if not isinstance(call, dict):
                continue
            if released is None or not any(matches(call, kept) for kept in released):
                wrong.append(f"{where} {describe_call(call)}")
            elif call.get("kind") == "custom" and custom_grammar_violation(
                request, str(call.get("name")), str(call.get("raw"))
            ):
                grammar.append(f"{where} {describe_call(call)}")
    if released is None:
        totals.refused_reads[job.reader] += 1
        if not result.get("error"):
            totals.silent_refusals[job.reader] += 1
    if released is not None and not result.get("error"):
        ended = [c for c in (result.get("calls") or []) if isinstance(c, dict)]
        missed = sum(1 for kept in released if not any(matches(c, kept) for c in ended))
        totals.missed[job.reader] += missed
        if missed:
            for name in case.labels or (UNMUTATED,):
                totals.missed_by_mutation[(job.reader, name)] += 1
    gate = (
        "refused"
        if released is None
        else "released " + (", ".join(describe_released(c) for c in released) or "no call")
    )
    if wrong:
        text = f"{job.reader} read {'; '.join(wrong)} — the gate ({outcome}) {gate}"
        totals.findings.append(Finding(case, job.reader, classify(case, job.reader), text))
    if grammar:
        text = f"{job.reader} read {'; '.join(grammar)}: outside its tool's regex grammar"
        totals.findings.append(Finding(case, job.reader, f"known: {GRAMMAR}", text))


def _reading(result: dict[str, Any] | None) -> tuple[object, ...]:
    if result is None:
        return ("no result",)
    calls = sorted(
        _canonical([c.get("name"), _reader_value(c) if c.get("kind") != "custom" else c.get("raw")])
        for c in (result.get("calls") or []) + (result.get("executed") or [])
        if isinstance(c, dict)
    )
    return (tuple(calls), bool(result.get("error")))


def _compare_direct(
    totals: Totals, case: Case, job: Job, proxied: dict[str, Any], direct: dict[str, Any] | None
) -> None:
    if _reading(proxied) == _reading(direct):
        return
    if direct is not None and not (direct.get("calls") or direct.get("executed")):
        # Directly the reader ended with no call (Chat's index-less calls, which openai-node
        # and the AI SDK cannot read); through the proxy it reads the canonical form
        # (docs/wire/chat.md §5), and what it read is checked against the released calls.
        return

    def show(result: dict[str, Any] | None) -> str:
        if result is None:
            return "no result"
        calls = [describe_call(c) for c in (result.get("calls") or []) if isinstance(c, dict)]
        error = f", error {_short(str(result['error']), 120)}" if result.get("error") else ""
        return f"calls [{', '.join(calls)}]{error}"

    text = f"{job.reader}: through the proxy {show(proxied)}; directly {show(direct)}"
    totals.findings.append(Finding(case, job.reader, DIRECT, text))
