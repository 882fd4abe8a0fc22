"""What the hostile server does with an agent's first request: one complete response, one
of eight broken ones, or one of four opening faults.

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

One more break, in a group of its own (`grammar`), for an agent whose shell is a custom tool
with a declared grammar (Codex's default model and its `exec`):

- `second-call-ungrammatical`: a second call to the shell whose input its grammar refuses
  (empty), then the terminal success. An agent without such a shell gets the
  `second-call-invalid` batch instead, labelled so.

An agent "ran a broken response" when the marker exists after any of the eight breaks: it
acted on a response that was not complete, or on a batch that was not wholly valid.

The opening faults break only the first request that would get the call, before any byte of
an answer (`Opening`); every later one gets the complete response, so a session that
survives the fault runs the command and finishes:

- `429-once`: HTTP 429, `retry-after: 1`, the protocol's rate-limit error body;
- `500-once`: HTTP 500, the protocol's server-error body;
- `reset-before-head-once`: the request is read, then a TCP reset, no byte answered;
- `silence-before-head-once`: the request is read, then silence until the client leaves.

There the marker is the wanted end: it says the agent (or the proxy for it) got past the
fault.

Three more breaks, in the group `eventstream`, exist only in the AWS event stream (Bedrock's
`invoke-with-response-stream`; run only for an agent that speaks it): `bad-crc` (the message
after the call carries a wrong CRC, then the rest as `complete`), `cut-in-frame` (the body
ends halfway through that message) and `malformed-tool-use` (the stop reason
`malformed_tool_use`, Bedrock's own verdict on the call).
"""

from __future__ import annotations

import enum

__all__ = [
    "BREAKS",
    "EVENTSTREAM_BREAKS",
    "GROUPS",
    "OPENING_FAULTS",
    "Ending",
    "Opening",
    "Outcome",
    "Terminal",
]


class Outcome(enum.Enum):
    COMPLETE = "complete"
    EOF_AFTER_CALL = "eof-after-call"
    EOF_INSIDE_ARGS = "eof-inside-args"
    RESET = "reset"
    SECOND_CALL_INVALID = "second-call-invalid"
    SECOND_CALL_UNKNOWN = "second-call-unknown"
    SECOND_CALL_UNGRAMMATICAL = "second-call-ungrammatical"
    IN_STREAM_ERROR = "in-stream-error"
    OUTPUT_LIMIT = "output-limit"
    STALL = "stall"
    BAD_CRC = "bad-crc"
    CUT_IN_FRAME = "cut-in-frame"
    MALFORMED_TOOL_USE = "malformed-tool-use"
    RATE_LIMITED_ONCE = "429-once"
    SERVER_ERROR_ONCE = "500-once"
    RESET_BEFORE_HEAD_ONCE = "reset-before-head-once"
    SILENCE_BEFORE_HEAD_ONCE = "silence-before-head-once"

    @property
    def opening(self) -> Opening | None:
        """The fault that answers the first request before any byte (None: not one)."""
        return _OPENINGS.get(self)

    @property
    def terminal(self) -> Terminal:
        """How the body's events end."""
        if self.opening is not None:
            return Terminal.SUCCESS  # the answer after the fault is the complete one
        if self in (
            Outcome.COMPLETE,
            Outcome.SECOND_CALL_INVALID,
            Outcome.SECOND_CALL_UNKNOWN,
            Outcome.SECOND_CALL_UNGRAMMATICAL,
            Outcome.BAD_CRC,  # the fault is in the framing, not the events
            Outcome.CUT_IN_FRAME,
        ):
            return Terminal.SUCCESS
        if self is Outcome.MALFORMED_TOOL_USE:
            return Terminal.MALFORMED
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


class Opening(enum.Enum):
    """How the first request that would get the call is answered, before any byte of a
    response."""

    RATE_LIMIT = "429"  # 429, retry-after: 1, the protocol's rate-limit error
    SERVER_ERROR = "500"  # 500, the protocol's server error
    RESET = "reset"  # a TCP reset
    SILENCE = "silence"  # nothing, until the client leaves


_OPENINGS: dict[Outcome, Opening] = {
    Outcome.RATE_LIMITED_ONCE: Opening.RATE_LIMIT,
    Outcome.SERVER_ERROR_ONCE: Opening.SERVER_ERROR,
    Outcome.RESET_BEFORE_HEAD_ONCE: Opening.RESET,
    Outcome.SILENCE_BEFORE_HEAD_ONCE: Opening.SILENCE,
}


class Terminal(enum.Enum):
    SUCCESS = "success"
    NONE = "none"
    ERROR = "error"
    LIMIT = "limit"
    MALFORMED = "malformed"  # Bedrock's `malformed_tool_use` stop reason


class Ending(enum.Enum):
    CLEAN = "clean"
    RESET = "reset"
    STALL = "stall"


OPENING_FAULTS: tuple[Outcome, ...] = tuple(_OPENINGS)
# Breaks only the AWS event stream has (Bedrock agents only; another agent is not run with
# them): a message with a bad CRC, a body cut inside a message, `malformed_tool_use`.
EVENTSTREAM_BREAKS: tuple[Outcome, ...] = (
    Outcome.BAD_CRC,
    Outcome.CUT_IN_FRAME,
    Outcome.MALFORMED_TOOL_USE,
)
BREAKS: tuple[Outcome, ...] = tuple(
    o
    for o in Outcome
    if o not in (Outcome.COMPLETE, Outcome.SECOND_CALL_UNGRAMMATICAL)
    and o not in _OPENINGS
    and o not in EVENTSTREAM_BREAKS
)
GROUPS: dict[str, tuple[Outcome, ...]] = {
    "gate": (Outcome.COMPLETE, *BREAKS),  # the complete response and the eight breaks
    "opening": OPENING_FAULTS,  # the four faults before the first byte, once
    "grammar": (Outcome.SECOND_CALL_UNGRAMMATICAL,),  # a custom shell's grammar broken
    "eventstream": EVENTSTREAM_BREAKS,  # the AWS event stream's own breaks (Bedrock agents)
}
