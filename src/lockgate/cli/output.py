"""What `run` and `lab` print at the end of a run, on the observer they print through, and
what `proxy` prints of each request and of its routes."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import TYPE_CHECKING

from .args import one_line

if TYPE_CHECKING:
    from ..conversation import Usage
    from ..credentials import Redactor
    from ..display import HumanDisplay, JsonLinesDisplay
    from ..proxy.config import ProxySettings
    from ..proxy.flow import ProxyRecord
    from ..session import SessionOutcome


def observer(json_lines: bool, redact: Redactor) -> HumanDisplay | JsonLinesDisplay:
    from ..display import HumanDisplay, JsonLinesDisplay

    if json_lines:
        return JsonLinesDisplay(sys.stdout, redact=redact)
    return HumanDisplay(sys.stdout, sys.stderr, redact=redact)


def print_outcome(
    outcome: SessionOutcome,
    usage: Usage | None,
    display: HumanDisplay | JsonLinesDisplay,
    redact: Redactor,
) -> None:
    """The run's last words: stop line, tools executed, the final file (indented: it is
    model-controlled), and usage last."""
    from ..display import JsonLinesDisplay, model_block, visible

    display.close()
    if isinstance(display, JsonLinesDisplay):
        display.emit(
            {
                "event": "final",
                "stopped": outcome.stopped,
                "executed_tools": outcome.executed_tools,
                "file": "calculator.py",
                "source": outcome.final_source,
                "usage": dataclasses.asdict(usage) if usage is not None else None,
            }
        )
        return
    source = model_block(redact(outcome.final_source))
    if not source.endswith("\n"):
        source += "\n"
    stopped = visible(redact(outcome.stopped), multiline=False)
    usage_line = usage.line() if usage is not None else "usage: not reported"
    sys.stdout.write(
        f"\nstopped: {stopped}\n"
        f"executed tools: {outcome.executed_tools}\n"
        f"final calculator.py:\n{source}"
        f"{usage_line}\n"
    )
    sys.stdout.flush()


def record_output(record: ProxyRecord, as_json: bool, redact: Redactor) -> str:
    """One request as `lockgate proxy` prints it: a JSON line (`--json`), or the human line,
    redacted and escaped."""
    from ..display import visible

    if not as_json:
        return visible(redact(record_line(record)), multiline=False)
    value = {
        "event": "request",
        "method": record.method,
        "path": record.path,
        "route": record.route,
        "protocol": record.protocol,
        "outcome": record.outcome,
        "withheld": record.withheld,
        "reason": record.reason,
        "status": record.status,
        "duration_ms": round(record.duration * 1000, 1),
        "retries": record.retries,
        "upstream": record.upstream or None,
        "attempts": [
            {
                "upstream": attempt.upstream,
                "fallback": attempt.fallback,
                "status": attempt.status,
                "retried": attempt.retried,
                "ms": round(max(0.0, attempt.ended - attempt.started) * 1000, 1),
            }
            for attempt in record.attempts
        ],
    }
    return json.dumps(redact.redact_value(value))


def record_line(record: ProxyRecord) -> str:
    """One request as the human log prints it (before redaction and escaping)."""
    outcome: str = record.outcome
    if record.outcome == "withheld":
        plural = "" if record.withheld == 1 else "s"
        outcome = f"withheld {record.withheld} call{plural}: {record.reason}"
    elif record.reason is not None and record.outcome != "passed":
        outcome = f"{record.outcome}: {record.reason}"
    line = (
        f"{record.method} {record.path} {record.protocol or '-'} {outcome} {record.status} "
        f"{record.duration * 1000:.0f} ms"
    )
    if len(record.attempts) > 1:  # which upstream answered, and why each before was retried
        tried = ", ".join(
            f"{attempt.upstream} {attempt.retried}" for attempt in record.attempts[:-1]
        )
        line += f" (answered by {record.upstream} after {tried})"
    return line


def routes_line(settings: ProxySettings) -> str:
    """Where each route goes: `UPSTREAM` for one route on every path, else `PREFIX ->
    UPSTREAM, …` (no secret)."""
    routes = settings.routes
    if len(routes) == 1 and not routes[0].prefix:
        return one_line(routes[0].upstream.url)
    return ", ".join(f"{route.prefix} -> {one_line(route.upstream.url)}" for route in routes)


def listening_output(
    url: str, settings: ProxySettings, as_json: bool, workers: int | None = None, loop: str = ""
) -> str:
    """The first line `lockgate proxy` prints: where it listens and where its routes go
    (`--workers N`: and how many processes serve), and the event loop it runs on."""
    upstream = routes_line(settings)
    if as_json:
        value: dict[str, object] = {"event": "listening", "url": url, "upstream": upstream}
        if workers is not None:
            value["workers"] = workers
        if loop:
            value["loop"] = loop
        return json.dumps(value)
    notes = [f"{workers} workers"] if workers is not None else []
    if loop:
        notes.append(f"event loop: {loop}")
    served = f" ({', '.join(notes)})" if notes else ""
    return f"proxying at {url} -> {upstream}{served}"
