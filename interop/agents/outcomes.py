"""What the hostile server does with an agent's first request: one complete response, or one
of eight broken ones.

Every response starts with one valid, complete call to the agent's own shell tool (a command
that creates a marker file), except `eof-inside-args`, which ends inside that call's
arguments. What follows the call decides the outcome:

- `complete`: the protocol's terminal success;
- `eof-after-call`: the body ends cleanly, without any terminal event;
- `eof-inside-args`: (the arguments cut in half) the body ends cleanly;
- `reset`: a TCP reset (RST), no terminal;
- `second-call-invalid`: a second call missing a required argument, then the terminal
  success;
- `second-call-unknown`: a second call to a tool the request did not declare, then the
  terminal success;
- `in-stream-error`: the protocol's in-stream error, the body ends;
- `output-limit`: the terminal says the output-token limit was reached;
- `stall`: nothing more: the connection stays open and silent until the client leaves.

An agent "ran a broken response" when the marker exists after any of the eight breaks: it
acted on a response that was not complete, or on a batch that was not wholly valid.
"""

from __future__ import annotations

import enum

__all__ = ["BREAKS", "Ending", "Outcome", "Terminal"]


class Outcome(enum.Enum):
    COMPLETE = "complete"
    EOF_AFTER_CALL = "eof-after-call"
    EOF_INSIDE_ARGS = "eof-inside-args"
    RESET = "reset"
    SECOND_CALL_INVALID = "second-call-invalid"
    SECOND_CALL_UNKNOWN = "second-call-unknown"
    IN_STREAM_ERROR = "in-stream-error"
    OUTPUT_LIMIT = "output-limit"
    STALL = "stall"

    @property
    def terminal(self) -> Terminal:
        """How the body's events end."""
        if self in (Outcome.COMPLETE, Outcome.SECOND_CALL_INVALID, Outcome.SECOND_CALL_UNKNOWN):
            return Terminal.SUCCESS
        if self is Outcome.IN_STREAM_ERROR:
            return Terminal.ERROR
        if self is Outcome.OUTPUT_LIMIT:
            return Terminal.LIMIT
        return Terminal.NONE

    @property
    def ending(self) -> Ending:
        """How the connection ends after the last event."""
        if self is Outcome.RESET:
            return Ending.RESET
        if self is Outcome.STALL:
            return Ending.STALL
        return Ending.CLEAN


class Terminal(enum.Enum):
    SUCCESS = "success"
    NONE = "none"
    ERROR = "error"
    LIMIT = "limit"


class Ending(enum.Enum):
    CLEAN = "clean"
    RESET = "reset"
    STALL = "stall"


BREAKS: tuple[Outcome, ...] = tuple(o for o in Outcome if o is not Outcome.COMPLETE)
