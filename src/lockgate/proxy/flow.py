"""One exchange through the proxy, as its concerns see it: a `Flow` per request, filled in
as it goes (its route and protocol, each attempt upstream, what the gate decided, when the
first byte came and went, how long it was held, the tokens the response stated), and the
hooks that observe it (`FlowHook`: the log, the metrics), told when a flow starts and when
it ends. A hook never changes a flow, and one that fails never fails a request.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ..cassette.format import Verdict
from ..cassette.recorder import Exchange
from ..conversation import Usage
from ..events import Event, ResponseStarted, UsageReported
from .engine import Accepted, GatingStream, Refused

__all__ = [
    "INCOMPLETE_KINDS",
    "AttemptRecord",
    "Flow",
    "FlowHook",
    "LogHook",
    "Outcome",
    "ProxyRecord",
    "notify_done",
    "notify_started",
]

# What a request is recorded as: passed (accepted by the gate), withheld (refused, tool calls
# withheld), refused (refused, none streamed), forwarded (not judged: an error status, a
# pass-through path), error (the upstream could not be reached, failed before its answer or
# broke off a pass-through), rejected (by the proxy itself: token, browser, path, size,
# capacity, stopping, a request it cannot parse), abandoned (the client left), cut (the
# proxy stopped and its grace period ran out).
Outcome = Literal[
    "passed", "withheld", "refused", "forwarded", "error", "rejected", "abandoned", "cut"
]


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt upstream: its number (1-based), the upstream's name (its configured name
    or host, never a URL path or key), whether it was a fall-back, when it started and
    ended (`time.monotonic()`), the status it answered (None: no answer), why it was tried
    again (a short kind: `no_answer`, `status_429` …, `context_window`, a refusal's kind;
    None: it was the last) and whether that was the gate's refusal of its answer."""

    number: int
    upstream: str
    fallback: bool
    started: float
    ended: float
    status: int | None
    retried: str | None = None
    refused: bool = False


@dataclass(frozen=True, slots=True)
class ProxyRecord:
    """One request, when it ended: its method and path (without the query), the protocol it
    was gated with (None: passed unchanged), what became of it, the tool calls withheld, why
    (`kind: reason` for a refusal; redacted), the status sent, the seconds it took, the
    route that served it, the attempts upstream beyond the first (retries and fall-backs),
    the upstream whose answer was the last, and every attempt (why each was retried)."""

    method: str
    path: str
    protocol: str | None
    outcome: Outcome
    withheld: int
    reason: str | None
    status: int
    duration: float
    route: str = ""
    retries: int = 0
    upstream: str = ""  # the upstream that gave the last answer ("": none was tried)
    attempts: tuple[AttemptRecord, ...] = ()  # each attempt upstream, in order


# The refusals that say an upstream stream did not end complete (counted apart: a 200 status
# hides them).
INCOMPLETE_KINDS = frozenset({"stream_ended", "transport", "idle_timeout", "deadline", "cleanup"})


@dataclass(slots=True)
class Flow:
    """One request, filled in as it goes (`time.monotonic()` for every time: uvloop's loop
    time moves in whole milliseconds, once an iteration)."""

    method: str
    path: str  # the plain path the client sent
    protocol: str | None
    started: float
    route: str = ""
    upstream_path: str = ""  # the path sent upstream (the route's prefix removed)
    admitted: bool = False  # the proxy took it (hooks were told it started)
    outcome: Outcome = "error"
    withheld: int = 0
    reason: str | None = None
    status: int = 0
    kind: str | None = None  # a refusal's kind
    exchange: Exchange | None = None  # the exchange being recorded (`--record`)
    verdict: Verdict | None = None  # what the gate decided, for the recording
    retries: int = 0  # attempts upstream beyond the first (a fall-back's included)
    fallbacks: int = 0  # attempts that went to a fall-back upstream
    incomplete: bool = False  # an upstream stream that did not end complete
    first_read_at: float | None = None  # the upstream's first body bytes (a stream)
    first_sent_at: float | None = None  # the first body bytes sent to the client
    held_from: float | None = None  # when the gate began to hold (a stream)
    held_until: float | None = None  # when it released or refused what it held
    usage: Usage | None = None  # what the response stated it used
    calls: int = 0  # tool calls released
    # declared tools whose schema or grammar the gate cannot use (their calls are checked
    # as a JSON object only, a custom tool's input as any text)
    unusable_tools: int = 0
    ended: float | None = None
    request_model: str | None = None  # the model the request names (admission)
    response_model: str | None = None  # the model the response states (an event's)
    finish_reason: str | None = None  # an accepted response's finish (its decision's)
    attempts: list[AttemptRecord] = field(default_factory=list)  # each attempt upstream
    retries_exhausted: bool = False  # the route's retries were all spent, and it failed

    def next_attempt(self) -> None:
        """A new attempt begins: what the gate decided of the one before is forgotten (its
        refusal is kept on its `AttemptRecord`), so the request ends with its last."""
        self.outcome, self.kind, self.reason, self.verdict = "error", None, None, None
        self.withheld, self.calls, self.incomplete = 0, 0, False
        self.first_read_at = self.held_from = self.held_until = None
        self.usage = self.response_model = self.finish_reason = None

    def judged(self, outcome: Accepted | Refused | None) -> None:
        """What the gate decided (None: the iteration was abandoned)."""
        if isinstance(outcome, Accepted):
            self.outcome = "passed"
            self.calls = len(outcome.decision.message.tool_calls)
            # `ResponseCompleted.finish_reason` as the decoder translated it (or, stated
            # none, the one the calls imply)
            self.finish_reason = outcome.decision.finish_reason
            self.verdict = Verdict("accepted", None, self.calls)
        elif isinstance(outcome, Refused):
            refusal = outcome.refusal
            self.verdict = Verdict("refused", refusal.kind, refusal.withheld)
            self.kind = refusal.kind
            self.withheld = refusal.withheld
            self.outcome = "withheld" if refusal.withheld else "refused"
            message = refusal.message
            _, colon, rest = message.partition(": ")
            self.reason = rest if colon and message.startswith("lockgate ") else message
        elif self.outcome not in ("abandoned", "error", "cut"):
            self.outcome = "abandoned"

    def judged_stream(self, stream: GatingStream, left: bool, now: float) -> None:
        """A gated stream's iteration ended (`now`: `time.monotonic()`): when it read and
        held, and what the gate decided (`left`: the client left first: abandoned)."""
        self.first_read_at = stream.first_read_at
        self.held_from = stream.held_from
        if self.held_from is not None:
            self.held_until = now
        if left:
            self.outcome = "abandoned"
            return
        self.judged(stream.outcome)
        if isinstance(stream.outcome, Refused):
            self.incomplete = stream.outcome.refusal.kind in INCOMPLETE_KINDS

    def observe(self, event: Event) -> None:
        """An observer of the gate (`GatingStream`, `judge_whole`), once per event: keeps
        the usage and the model the response stated (its finish comes with the decision:
        the gate tells no observer of `ResponseCompleted`, see `judged`)."""
        if type(event) is UsageReported:
            self.usage = event.usage
        elif type(event) is ResponseStarted and event.model is not None:
            self.response_model = event.model

    def record(self, redact: Callable[[str], str]) -> ProxyRecord:
        ended = self.started if self.ended is None else self.ended
        return ProxyRecord(
            self.method,
            self.path,
            self.protocol,
            self.outcome,
            self.withheld,
            None if self.reason is None else redact(self.reason),
            self.status,
            max(0.0, ended - self.started),
            self.route,
            self.retries,
            self.attempts[-1].upstream if self.attempts else "",
            tuple(self.attempts),
        )


class FlowHook(Protocol):
    """A concern that observes every flow: told when one starts (admitted, before it goes
    upstream) and when it ends (whatever became of it)."""

    def started(self, flow: Flow) -> None: ...

    def done(self, flow: Flow) -> None: ...


class LogHook:
    """One `ProxyRecord` per request, when it ends, redacted of every secret."""

    def __init__(self, log: Callable[[ProxyRecord], None], redact: Callable[[str], str]) -> None:
        self._log = log
        self._redact = redact

    def started(self, flow: Flow) -> None:
        pass

    def done(self, flow: Flow) -> None:
        self._log(flow.record(self._redact))


def notify_done(hooks: Sequence[FlowHook], flow: Flow) -> None:
    for hook in hooks:
        with contextlib.suppress(Exception):  # a hook that fails never fails a request
            hook.done(flow)


def notify_started(hooks: Sequence[FlowHook], flow: Flow) -> None:
    flow.admitted = True
    for hook in hooks:
        with contextlib.suppress(Exception):
            hook.started(flow)
