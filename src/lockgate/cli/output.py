"""What `run` and `lab` print at the end of a run, on the observer they print through."""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..conversation import Usage
    from ..credentials import Redactor
    from ..display import HumanDisplay, JsonLinesDisplay
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
