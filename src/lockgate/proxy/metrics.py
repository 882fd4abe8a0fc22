"""`GET /metrics`: what the proxy did, in Prometheus' text format (prometheus_client).

Every series is labelled by the route's name, the protocol (`responses`, `chat`,
`anthropic`, `gemini`, or `none` for a request that is no protocol request) and, where it
says so, the outcome, the refusal's kind or the token type: never a key, a token, a prompt,
or a path beyond the route's name.

- `lockgate_proxy_requests_total{route,protocol,outcome}`: requests, by what became of
  them (`passed`, `withheld`, `refused`, `forwarded`, `rejected`, `error`, `abandoned`,
  `cut`);
- `lockgate_proxy_refusals_total{route,protocol,kind}`: responses the gate refused, by kind
  (`stream_ended`, `invalid_batch`, …);
- `lockgate_proxy_tool_calls_withheld_total{route,protocol}`: tool calls that streamed and
  were not released; `…_tool_calls_released_total`: those released;
- `lockgate_proxy_upstream_incomplete_total{route,protocol,kind}`: upstream streams that did
  not end complete (a 200 status hides them): cut, reset, silent, past the deadline;
- `lockgate_proxy_retries_total{route}`: attempts upstream beyond a request's first (unseen
  by the client); `lockgate_proxy_fallbacks_total{route}`: those to a fall-back upstream;
- `lockgate_proxy_attempts_total{route,upstream,result}`: every attempt upstream, by the
  upstream's name and what became of it: `answered` (the request's last attempt: which
  upstream answered), else why it was tried again (`status_429`, `no_answer`,
  `context_window`, a refusal's kind);
- `lockgate_proxy_retries_exhausted_total{route}`: requests that still failed after their
  retries were spent (at least one retry, and the last attempt failed as a retry would
  have been tried for: no answer, a retryable error status, a stream that did not end
  complete);
- `lockgate_proxy_in_flight{route}`: requests being served now;
- `lockgate_proxy_held_bytes`: bytes held now by every unfinished gated stream;
  `lockgate_proxy_held_bytes_limit`: what they may hold at once (`max_held_bytes`, as the
  server states it: `set_held_limit`), so that "near the budget" is their ratio;
- `lockgate_proxy_ready`: 1 while the proxy is ready (what `/readyz` answers 200 for), 0
  before it starts serving and from the moment it drains (as the server states it:
  `set_ready`);
- `lockgate_proxy_added_first_byte_seconds{route,protocol}`: time the proxy added before a
  stream's first byte reached the client;
- `lockgate_proxy_hold_seconds{route,protocol}`: time a stream was held, from its first
  call to the release or refusal;
- `lockgate_proxy_response_seconds{route,protocol}`: time from the request to the end of
  its answer;
- `lockgate_proxy_tokens_total{route,protocol,type}`: tokens the responses stated
  (`input`, `output`, `cached_input`, `reasoning`, `cache_write`);
- `lockgate_proxy_unusable_tools_total{route,protocol}`: tools declared by the requests
  whose schema or grammar the gate cannot use (each named once in the log; their calls are
  checked as a JSON object only, a custom tool's input as any text).

**Several workers** (`lockgate proxy --workers N`, gunicorn): each worker writes its series
to files in the folder `PROMETHEUS_MULTIPROC_DIR` names (prometheus_client's multiprocess
mode, chosen when it is first imported, so the folder is set before any worker starts), and
`/metrics` in any worker reads every worker's: counters and histograms summed, the gauges
summed over the workers alive (`in_flight`, `held_bytes`, `held_bytes_limit`: the budget
of every live worker together, as the bytes are), but `ready`, the highest of the live
workers' (1 while any worker alive is ready to take a new connection). A folder that is
not there (or not writable) is one line naming it (`multiprocess_folder_problem`), never a
traceback about one of its files. The gauges of a process that died without being marked
dead (SIGKILL, a crash, a restart after one) are forgotten when a proxy starts
(`forget_dead_processes`): their files would keep counting their last value, `in_flight`
above all.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import TYPE_CHECKING

from .config import ConfigError
from .flow import INCOMPLETE_KINDS, Flow

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = [
    "MULTIPROCESS_VARIABLE",
    "ProxyMetrics",
    "forget_dead_processes",
    "multiprocess_folder_problem",
]

MULTIPROCESS_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
# prometheus_client's file of one process's gauge summed (or kept) over the live processes.
_LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]*_(\d+)\.db")


def multiprocess_folder_problem(folder: str) -> str | None:
    """Why the metrics folder cannot hold every worker's series (None: it can)."""
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        return (
            f"{MULTIPROCESS_VARIABLE} names {folder}, which {what}: make it (empty) before "
            f"the proxy starts, or unset {MULTIPROCESS_VARIABLE}"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{MULTIPROCESS_VARIABLE} names {folder}, which this process cannot write"
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True


def forget_dead_processes(folder: str) -> list[int]:
    """Mark dead (`prometheus_client.multiprocess.mark_process_dead`) every process whose
    live gauges are in `folder` but which no longer runs; the pids forgotten."""
    from prometheus_client import multiprocess

    dead: list[int] = []
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            found = _LIVE_GAUGE_FILE.fullmatch(name)
            if found is None:
                continue
            pid = int(found.group(1))
            if pid in dead or _alive(pid):
                continue
            with contextlib.suppress(OSError):
                multiprocess.mark_process_dead(pid, folder)  # type: ignore[no-untyped-call]
            dead.append(pid)
    return dead


# Seconds: the proxy adds well under a millisecond before a byte; a held stream and a
# response last seconds to minutes.
_ADDED_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0)
_LONG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_TOKEN_FIELDS = (
    ("input", "input_tokens"),
    ("output", "output_tokens"),
    ("cached_input", "cached_input_tokens"),
    ("reasoning", "reasoning_tokens"),
    ("cache_write", "cache_write_tokens"),
)


# What a last attempt answered when a retry would have been tried for it: an error status
# the proxy retries (408, 409, 429, 5xx; `exchange.ProxyExchange._error_status`).
class ProxyMetrics:
    """The proxy's series (a `flow.FlowHook`), in a registry of their own; `render` is the
    text `/metrics` answers. In multiprocess mode (`PROMETHEUS_MULTIPROC_DIR` set when
    prometheus_client was imported), `render` reads every worker's files; a folder that
    cannot hold them is a `ConfigError` (one line), and the dead processes' gauges in it
    are forgotten first."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        folder = os.environ.get(MULTIPROCESS_VARIABLE)
        self.multiprocess = bool(folder)
        if folder:
            problem = multiprocess_folder_problem(folder)
            if problem is not None:
                raise ConfigError(problem)
            forget_dead_processes(folder)
        self.registry: CollectorRegistry = CollectorRegistry()
        registry = self.registry
        flow_labels = ("route", "protocol")
        self.requests = Counter(
            "lockgate_proxy_requests",
            "Requests, by what became of them.",
            (*flow_labels, "outcome"),
            registry=registry,
        )
        self.refusals = Counter(
            "lockgate_proxy_refusals",
            "Responses the gate refused, by kind.",
            (*flow_labels, "kind"),
            registry=registry,
        )
        self.withheld = Counter(
            "lockgate_proxy_tool_calls_withheld",
            "Tool calls that streamed and were not released.",
            flow_labels,
            registry=registry,
        )
        self.released = Counter(
            "lockgate_proxy_tool_calls_released",
            "Tool calls released.",
            flow_labels,
            registry=registry,
        )
        self.incomplete = Counter(
            "lockgate_proxy_upstream_incomplete",
            "Upstream streams that did not end complete, by kind.",
            (*flow_labels, "kind"),
            registry=registry,
        )
        self.retries = Counter(
            "lockgate_proxy_retries",
            "Attempts upstream beyond a request's first.",
            ("route",),
            registry=registry,
        )
        self.fallbacks = Counter(
            "lockgate_proxy_fallbacks",
            "Attempts that went to a fall-back upstream.",
            ("route",),
            registry=registry,
        )
        self.attempts = Counter(
            "lockgate_proxy_attempts",
            "Attempts upstream, by upstream and what became of each: answered (the request's "
            "last), else why it was tried again.",
            ("route", "upstream", "result"),
            registry=registry,
        )
        self.exhausted = Counter(
            "lockgate_proxy_retries_exhausted",
            "Requests that still failed after their retries were spent.",
            ("route",),
            registry=registry,
        )
        self.in_flight = Gauge(
            "lockgate_proxy_in_flight",
            "Requests being served now.",
            ("route",),
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.held = Gauge(
            "lockgate_proxy_held_bytes",
            "Bytes held now by every unfinished gated stream.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.held_limit = Gauge(
            "lockgate_proxy_held_bytes_limit",
            "The bytes every unfinished gated stream may hold at once (max_held_bytes).",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.ready = Gauge(
            "lockgate_proxy_ready",
            "1 while the proxy is ready for new requests (/readyz 200), else 0.",
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.added = Histogram(
            "lockgate_proxy_added_first_byte_seconds",
            "Time the proxy added before a stream's first byte reached the client.",
            flow_labels,
            registry=registry,
            buckets=_ADDED_BUCKETS,
        )
        self.hold = Histogram(
            "lockgate_proxy_hold_seconds",
            "Time a stream was held, from its first call to the release or refusal.",
            flow_labels,
            registry=registry,
            buckets=_LONG_BUCKETS,
        )
        self.response = Histogram(
            "lockgate_proxy_response_seconds",
            "Time from the request to the end of its answer.",
            flow_labels,
            registry=registry,
            buckets=_LONG_BUCKETS,
        )
        self.tokens = Counter(
            "lockgate_proxy_tokens",
            "Tokens the responses stated, by type.",
            (*flow_labels, "type"),
            registry=registry,
        )

        self.unusable_tools = Counter(
            "lockgate_proxy_unusable_tools",
            "Declared tools whose schema or grammar the gate cannot use.",
            flow_labels,
            registry=registry,
        )

    # --- the hook ---------------------------------------------------------------------------

    def started(self, flow: Flow) -> None:
        self.in_flight.labels(flow.route).inc()

    def done(self, flow: Flow) -> None:
        route = flow.route
        protocol = flow.protocol or "none"
        if flow.admitted:
            self.in_flight.labels(route).dec()
        self.requests.labels(route, protocol, flow.outcome).inc()
        if flow.kind is not None:
            self.refusals.labels(route, protocol, flow.kind).inc()
            if flow.incomplete:
                self.incomplete.labels(route, protocol, flow.kind).inc()
        for attempt in flow.attempts:
            result = attempt.retried or "answered"
            self.attempts.labels(route, attempt.upstream, result).inc()
            if attempt.refused and attempt.retried is not None:  # refused, then retried unseen
                self.refusals.labels(route, protocol, attempt.retried).inc()
                if attempt.retried in INCOMPLETE_KINDS:
                    self.incomplete.labels(route, protocol, attempt.retried).inc()
        if flow.withheld:
            self.withheld.labels(route, protocol).inc(flow.withheld)
        if flow.calls:
            self.released.labels(route, protocol).inc(flow.calls)
        if flow.unusable_tools:
            self.unusable_tools.labels(route, protocol).inc(flow.unusable_tools)
        if flow.retries:
            self.retries.labels(route).inc(flow.retries)
        if flow.fallbacks:
            self.fallbacks.labels(route).inc(flow.fallbacks)
        if flow.retries_exhausted:
            self.exhausted.labels(route).inc()
        if flow.first_read_at is not None and flow.first_sent_at is not None:
            added = max(0.0, flow.first_sent_at - flow.first_read_at)
            self.added.labels(route, protocol).observe(added)
        if flow.held_from is not None and flow.held_until is not None:
            self.hold.labels(route, protocol).observe(max(0.0, flow.held_until - flow.held_from))
        if flow.ended is not None and flow.admitted:
            self.response.labels(route, protocol).observe(max(0.0, flow.ended - flow.started))
        usage = flow.usage
        if usage is not None:
            for kind, field_name in _TOKEN_FIELDS:
                count = getattr(usage, field_name, 0)
                if count:
                    self.tokens.labels(route, protocol, kind).inc(count)

    def held_bytes(self, held: int) -> None:
        """The bytes every gated stream of this process holds now (`engine.HeldBudget`)."""
        self.held.set(held)

    def set_held_limit(self, limit: int) -> None:
        """The bytes every gated stream of this process may hold at once
        (`engine.HeldBudget.limit`, `max_held_bytes`)."""
        self.held_limit.set(limit)

    def set_ready(self, ready: bool) -> None:
        """Whether this process is ready for new requests, as `/readyz` says: told True once
        it serves (the upstream session open, routes configured), False from the moment it
        drains or stops."""
        self.ready.set(1 if ready else 0)

    # --- `/metrics` -----------------------------------------------------------------------

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type: this process's series, or, in
        multiprocess mode, every worker's."""
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        if self.multiprocess:
            from prometheus_client import multiprocess

            combined = CollectorRegistry()
            multiprocess.MultiProcessCollector(combined)  # type: ignore[no-untyped-call]
            return generate_latest(combined), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
