"""Observers that render events: human terminal output or JSON lines.

Display never authorizes anything; it only reports. Argument progress is throttled so a
stream of thousands of deltas stays readable and cheap. Everything printed is hostile
server text until proven otherwise, so every line is redacted first (on the raw text, so
a secret is found before anything reshapes it), and the terminal display then makes
control characters visible (`visible`) and indents model text, so that neither escape
sequences nor a forged `stopped: …` line can reach the terminal. Deltas go through one
`StreamRedactor` per kind, so a secret split across two deltas is never printed whole.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal, TextIO

from .credentials import Redactor, StreamRedactor
from .events import (
    DecisionReady,
    Event,
    ReasoningDelta,
    Recovering,
    RefusalDelta,
    ResponseFailed,
    ResponseStarted,
    Retrying,
    RunStopped,
    TextDelta,
    ToolArgumentProgress,
    ToolCallStarted,
    ToolFinished,
    ToolStarted,
    UsageReported,
)

__all__ = [
    "MAX_REASONING_CHARS",
    "PROGRESS_INTERVAL_SECONDS",
    "REASONING_TRUNCATED",
    "RESULT_PREVIEW_CHARS",
    "HumanDisplay",
    "JsonLinesDisplay",
    "Redactor",
    "event_record",
    "model_block",
    "visible",
]

PROGRESS_INTERVAL_SECONDS = 0.25
RESULT_PREVIEW_CHARS = 400
MAX_REASONING_CHARS = 64_000
REASONING_TRUNCATED = (
    f"thinking: … (reasoning output truncated at {MAX_REASONING_CHARS} characters)"
)
MODEL_INDENT = "  "

# Characters a terminal may act on instead of showing: C0 controls, DEL, C1 controls (ESC
# and CSI among them), bidi embeddings, overrides, isolates and marks, the Unicode line and
# paragraph separators, and lone surrogates (which cannot even be encoded).
_HIDDEN = r"\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff"
_UNSAFE_MULTILINE = re.compile(rf"[\x00-\x08\x0b-\x1f{_HIDDEN}]")  # keeps \n and \t
_UNSAFE_LINE = re.compile(rf"[\x00-\x1f{_HIDDEN}]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_SURROGATE = re.compile(r"[\ud800-\udfff]")

_Kind = Literal["text", "refusal", "reasoning"]


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, *, multiline: bool) -> str:
    """`text` with every character a terminal might act on replaced by a printable escape
    (`\\x1b`, `\\r`, `\\u202e`, `\\ud800`): C0 controls (but `\\n` and `\\t` when
    `multiline`), DEL, C1 controls, bidi controls, U+2028/U+2029 and lone surrogates.
    Ordinary text, emoji, CJK and accents are unchanged; text with nothing to escape costs
    one regex search."""
    pattern = _UNSAFE_MULTILINE if multiline else _UNSAFE_LINE
    if pattern.search(text) is None:
        return text
    return pattern.sub(_escape, text)


def _indent(text: str, at_line_start: bool) -> tuple[str, bool]:
    """`text` with `MODEL_INDENT` before each line's first character (empty lines stay
    empty), and whether the output then ends at the start of a line."""
    pieces: list[str] = []
    for number, line in enumerate(text.split("\n")):
        if number:
            pieces.append("\n")
            at_line_start = True
        if line:
            if at_line_start:
                pieces.append(MODEL_INDENT)
            pieces.append(line)
            at_line_start = False
    return "".join(pieces), at_line_start


def model_block(text: str) -> str:
    """A whole block of model-controlled text (a final file, an answer) as printed: control
    characters visible and every line indented, so it cannot pass for lockgate's lines.
    Redact it first."""
    block, _ = _indent(visible(text, multiline=True), True)
    return block


class _ProgressThrottle:
    def __init__(self, interval: float, clock: Callable[[], float]) -> None:
        self._interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}

    def due(self, key: str) -> bool:
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            return False
        self._last[key] = now
        return True


class _ReasoningBound:
    """The display's own guard on reasoning per response: the first `limit` characters
    pass, the rest is dropped until the next response starts."""

    def __init__(self, limit: int = MAX_REASONING_CHARS) -> None:
        self._limit = limit
        self._chars = 0
        self._cut = False

    def reset(self) -> None:
        self._chars = 0
        self._cut = False

    def take(self, text: str) -> tuple[str, bool]:
        """The part of `text` to show, and whether the bound was reached just now."""
        if self._cut:
            return "", False
        room = self._limit - self._chars
        if len(text) <= room:
            self._chars += len(text)
            return text, False
        self._chars = self._limit
        self._cut = True
        return text[:room], True


def _preview(redact: Redactor, text: str, limit: int = RESULT_PREVIEW_CHARS) -> str:
    """A redacted, one-line, bounded preview (redacted before it is cut, so a cut can never
    leave the start of a secret behind)."""
    flat = visible(redact(text), multiline=False)
    return flat if len(flat) <= limit else flat[:limit] + "…"


class HumanDisplay:
    """Text deltas to stdout as they arrive; reasoning, progress, calls and results to stderr.

    Model text is redacted (per-kind `StreamRedactor`), made `visible` and indented by two
    spaces on every line, so it can never produce a column-0 line that looks like
    lockgate's own (`stopped: …`, `executed tools: …`, `usage: …`). A refusal starts on a
    new line with `refusal: `, reasoning with `thinking (KIND): `; their later lines are
    indented too. Status lines are one redacted, visible line each. Held-back text is
    released when the kind of output changes and by `close()`, which the caller invokes
    before writing its own final lines. At most `MAX_REASONING_CHARS` of reasoning are shown
    per response, then one `REASONING_TRUNCATED` line.
    """

    def __init__(
        self,
        stdout: TextIO,
        stderr: TextIO,
        *,
        redact: Redactor | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.redact = redact or Redactor()
        self._throttle = _ProgressThrottle(PROGRESS_INTERVAL_SECONDS, clock)
        self._streams: dict[_Kind, StreamRedactor] = {
            "text": self.redact.stream(),
            "refusal": self.redact.stream(),
            "reasoning": self.redact.stream(),
        }
        self._reasoning = _ReasoningBound()
        self._open: _Kind | None = None  # the kind of model output being written
        self._at_line_start = True  # whether that output ends at the start of a line

    def _target(self, kind: _Kind) -> TextIO:
        return self.stderr if kind == "reasoning" else self.stdout

    def _write_model(self, kind: _Kind, released: str) -> None:
        if released:
            text, self._at_line_start = _indent(
                visible(released, multiline=True), self._at_line_start
            )
            self._target(kind).write(text)

    def _settle(self) -> None:
        """Ends the open model output: releases its held text and ends its line."""
        kind = self._open
        if kind is None:
            return
        target = self._target(kind)
        self._write_model(kind, self._streams[kind].flush())
        if not self._at_line_start:
            target.write("\n")
        target.flush()
        self._open = None
        self._at_line_start = True

    def _model(self, kind: _Kind, text: str, label: str = "") -> None:
        """Writes a delta of model output, starting that kind's line (and label) if needed."""
        if self._open != kind:
            self._settle()
            self._open = kind
            if label:
                self._target(kind).write(label)
                self._at_line_start = False
        target = self._target(kind)
        self._write_model(kind, self._streams[kind].feed(text))
        target.flush()

    def _status(self, line: str) -> None:
        self._settle()
        self.stderr.write(visible(self.redact(line), multiline=False) + "\n")
        self.stderr.flush()

    def close(self) -> None:
        """Releases everything held back and ends any open line (call before final lines)."""
        self._settle()
        self.stdout.flush()
        self.stderr.flush()

    def __call__(self, event: Event) -> None:
        if isinstance(event, ReasoningDelta):
            # Reasoning goes to stderr, apart from the answer, marked as such.
            shown, cut = self._reasoning.take(event.text)
            if shown:
                self._model("reasoning", shown, f"thinking ({event.kind}): ")
            if cut:
                self._status(REASONING_TRUNCATED)
        elif isinstance(event, TextDelta):
            self._model("text", event.text)
        elif isinstance(event, RefusalDelta):
            self._model("refusal", event.text, "refusal: ")
        elif isinstance(event, ToolArgumentProgress):
            if self._throttle.due(event.call_id):
                self._status(f"arguments buffered: {event.name} ({event.chars} chars)")
        elif isinstance(event, ToolCallStarted):
            self._status(f"tool call streaming: {event.name} ({event.call_id})")
        elif isinstance(event, Retrying):
            self._status(
                f"retry opening: attempt {event.attempt}/{event.max_attempts} "
                f"in {event.delay:.2f} s ({event.reason})"
            )
        elif isinstance(event, ResponseFailed):
            self._status(f"response failed: {event.kind}: {event.message}")
        elif isinstance(event, DecisionReady):
            calls = ", ".join(call.name for call in event.message.tool_calls) or "none"
            self._status(f"response complete ({event.finish_reason}): calls: {calls}")
        elif isinstance(event, Recovering):
            self._status(
                f"recovering from {event.kind}: {event.calls} call(s) answered with errors, "
                f"none executed ({event.consecutive}/{event.budget} in a row)"
            )
        elif isinstance(event, ToolStarted):
            arguments = json.dumps(
                self.redact.redact_value(dict(event.call.arguments)), ensure_ascii=False
            )
            self._status(f"run {event.call.name} {_preview(self.redact, arguments)}")
        elif isinstance(event, ToolFinished):
            self._status(f"result {event.name}: {_preview(self.redact, event.output)}")
        elif isinstance(event, ResponseStarted):
            self._settle()
            self._reasoning.reset()
        elif isinstance(event, RunStopped):
            self._settle()  # the CLI prints the stop and usage lines itself
        elif isinstance(event, UsageReported):
            pass


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_jsonable(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    return value


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


def event_record(event: Any) -> dict[str, Any]:
    """The JSON form of an event: `{"event": "text_delta", ...fields}`."""
    record: dict[str, Any] = {"event": _snake(type(event).__name__)}
    record.update(_jsonable(event))
    return record


def _escape_surrogate(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


class JsonLinesDisplay:
    """Every event as one JSON object per line (argument progress throttled).

    Every record is redacted value by value (`Redactor.redact_value`) before it is
    encoded; lone surrogates are written as `\\udXXX` escapes, so each line is valid UTF-8
    JSON. JSON escapes control characters itself (ESC becomes `\\u001b`).

    Text, refusal and reasoning deltas go through one `StreamRedactor` per kind: each delta
    still yields exactly one record, whose `text` is the part that can be released now
    (possibly `""`); the held-back rest follows as one extra record of the same event and
    fields when the kind of output changes, before any other record (including `emit`),
    and on `close()`. So a secret split across two deltas is never whole in one record.
    At most `MAX_REASONING_CHARS` of reasoning are written per response; then one
    `{"event": "reasoning_truncated", "limit": N, "message": REASONING_TRUNCATED}` record,
    and no more reasoning until the next `response_started`.
    """

    def __init__(
        self,
        stdout: TextIO,
        *,
        redact: Redactor | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stdout = stdout
        self.redact = redact or Redactor()
        self._throttle = _ProgressThrottle(PROGRESS_INTERVAL_SECONDS, clock)
        self._streams: dict[_Kind, StreamRedactor] = {
            "text": self.redact.stream(),
            "refusal": self.redact.stream(),
            "reasoning": self.redact.stream(),
        }
        self._reasoning = _ReasoningBound()
        self._open: _Kind | None = None
        self._last: dict[str, Any] = {}  # the open kind's last record: the flush's template

    def _settle(self) -> None:
        """Writes what the open kind holds back as one extra record of the same shape."""
        kind = self._open
        if kind is None:
            return
        self._open = None
        held = self._streams[kind].flush()
        if held:
            self._write({**self._last, "text": held})

    def _delta(self, kind: _Kind, event: TextDelta | RefusalDelta | ReasoningDelta) -> None:
        if self._open != kind:
            self._settle()
            self._open = kind
        record = event_record(event)
        record["text"] = self._streams[kind].feed(event.text)
        self._last = record
        self._write(record)

    def __call__(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self._delta("text", event)
        elif isinstance(event, RefusalDelta):
            self._delta("refusal", event)
        elif isinstance(event, ReasoningDelta):
            shown, cut = self._reasoning.take(event.text)
            if shown:
                self._delta("reasoning", dataclasses.replace(event, text=shown))
            if cut:
                self.emit(
                    {
                        "event": "reasoning_truncated",
                        "limit": MAX_REASONING_CHARS,
                        "message": REASONING_TRUNCATED,
                    }
                )
        elif isinstance(event, ToolArgumentProgress) and not self._throttle.due(event.call_id):
            return
        else:
            if isinstance(event, ResponseStarted):
                self._reasoning.reset()
            self.emit(event_record(event))

    def close(self) -> None:
        """Writes everything held back (call before the final record)."""
        self._settle()
        self.stdout.flush()

    def emit(self, record: dict[str, Any]) -> None:
        """Writes one record (redacted), after anything still held back."""
        self._settle()
        self._write(record)

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps(
            self.redact.redact_value(record),
            ensure_ascii=False,
            default=lambda value: self.redact(str(value)),
        )
        if _SURROGATE.search(line) is not None:
            line = _SURROGATE.sub(_escape_surrogate, line)
        self.stdout.write(line + "\n")
        self.stdout.flush()
