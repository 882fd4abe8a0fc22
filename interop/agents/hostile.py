"""The hostile responder: a model that answers an agent's first request with a call to the
agent's own shell tool, then completes or breaks the response (`Outcome`); later turns
(after a tool's result) and requests without a shell tool get a plain text "done".

Every first request gets the same answer, so an agent that retries a broken response gets
the same broken response again: the marker exists only when the agent acted on one. A
first request that asks for a whole (non-streaming) answer — Claude Code falls back to one
after three failed streams — gets the same decision whole, broken the same way where a
whole answer can be: the body cut short (`eof-after-call` at 90 %, `eof-inside-args` at
50 %), cut and reset (`reset`), the protocol's transient HTTP error (`in-stream-error`:
Anthropic 529 `overloaded_error`, OpenAI 500, Gemini 503), the stop reason of the limit
(`output-limit`), the head and no body (`stall`); both calls for the second-call outcomes.

The opening faults (`OpeningFaultResponder`) answer only the first such request with the
fault, streamed or whole alike, before any byte of a response: a 429 with `retry-after: 1`
and the protocol's rate-limit error, a 500 with its server error (`opening_error`), a TCP
reset, or silence until the client leaves. Every later first-turn request (the retry, the
agent's or the proxy's) gets the complete response.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from .outcomes import Ending, Opening, Outcome
from .server import Exchange, NoAnswer, Reply, Responder, StreamReply, WholeReply, text_reply
from .tools import ShellCalls, has_tool_result, shell_calls
from .wire import Call, Script, whole_calls, whole_error

__all__ = ["HostileResponder", "OpeningFaultResponder", "opening_error", "responder_for"]


@dataclass(frozen=True)
class HostileResponder:
    outcome: Outcome
    command: str  # the shell command that creates the marker
    pause: float = 0.5  # seconds after each call before what follows it
    functions_namespace: bool = False  # name Codex's `functions` namespace in its calls

    def __post_init__(self) -> None:
        if self.outcome.opening is not None:
            raise ValueError(f"{self.outcome.value} is an opening fault: use responder_for()")

    def calls_for(self, exchange: Exchange) -> ShellCalls | None:
        """The calls a first-turn request with a shell tool gets (None: a later turn, or a
        request without a shell: it gets a plain "done")."""
        body = exchange.json_body()
        protocol = exchange.protocol
        if body is None or protocol is None or has_tool_result(protocol, body):
            return None
        return shell_calls(
            protocol, body, self.command, functions_namespace=self.functions_namespace
        )

    def __call__(self, exchange: Exchange) -> Reply:
        return self.answer(exchange, self.outcome.value)

    def answer(self, exchange: Exchange, case: str) -> Reply:
        """The answer, its label starting with `case` for a first-turn request."""
        calls = self.calls_for(exchange)
        body = exchange.json_body()
        protocol = exchange.protocol
        if calls is None or body is None or protocol is None:
            return text_reply(exchange)
        model = body.get("model") or _path_model(exchange.path)
        model_name = model if isinstance(model, str) else "hostile-model"
        outcome = self.outcome
        script_calls: tuple[Call, ...] = (calls.run,)
        if outcome is Outcome.SECOND_CALL_INVALID:
            script_calls = (calls.run, calls.invalid)
        elif outcome is Outcome.SECOND_CALL_UNKNOWN:
            script_calls = (calls.run, calls.undeclared)
        elif outcome is Outcome.SECOND_CALL_UNGRAMMATICAL:
            if calls.ungrammatical is None:
                case = f"{case} (no grammar: the invalid call)"
            script_calls = (calls.run, calls.ungrammatical or calls.invalid)
        script = Script(
            calls=script_calls,
            cut=outcome is Outcome.EOF_INSIDE_ARGS,
            terminal=outcome.terminal,
            model=model_name,
            fault=_FAULTS.get(outcome),
        )
        label = f"{case}: {calls.run.name}" + (
            f" + {script_calls[1].name}" if len(script_calls) > 1 else ""
        )
        if exchange.streaming():
            return StreamReply(script, outcome.ending, self.pause, label)
        return _whole(protocol, script, outcome, exchange.serial, f"{label} (whole)")


# The event stream's own faults, in a stream (`wire._bedrock`).
_FAULTS = {Outcome.BAD_CRC: "bad-crc", Outcome.CUT_IN_FRAME: "cut-in-frame"}


def _path_model(path: str) -> str | None:
    """Bedrock's model, from `…/model/{id}/invoke…` (its body names none)."""
    _, found, rest = path.partition("/model/")
    return unquote(rest.split("/", 1)[0]) if found else None


def _whole(protocol: str, script: Script, outcome: Outcome, serial: int, label: str) -> Reply:
    if outcome in _FAULTS:  # a whole answer has no frames: its body cut instead
        return WholeReply(whole_calls(protocol, script, serial), label=label, cut=0.9)
    if outcome is Outcome.IN_STREAM_ERROR:
        status, error = whole_error(protocol)
        return WholeReply(error, status, label)
    body = whole_calls(protocol, script, serial)
    if outcome is Outcome.EOF_AFTER_CALL:
        return WholeReply(body, label=label, cut=0.9)
    if outcome is Outcome.EOF_INSIDE_ARGS:
        return WholeReply(body, label=label, cut=0.5)
    if outcome is Outcome.RESET:
        return WholeReply(body, label=label, cut=0.5, ending=Ending.RESET)
    if outcome is Outcome.STALL:
        return WholeReply(body, label=label, ending=Ending.STALL)
    return WholeReply(body, label=label)


class OpeningFaultResponder:
    """The first first-turn request with a shell tool gets `opening`, before any byte of an
    answer; every other request is answered as `complete` answers it (the call, then "done"
    on the next turn). Its state (whether the fault went out) lives as long as one run's
    server."""

    def __init__(self, case: str, opening: Opening, complete: HostileResponder) -> None:
        self.case = case
        self.opening = opening
        self.complete = complete
        self.faulted = False

    def __call__(self, exchange: Exchange) -> Reply:
        if self.faulted or self.complete.calls_for(exchange) is None:
            return self.complete.answer(exchange, f"{self.case}: then complete")
        self.faulted = True
        label = f"{self.case}: {self.opening.value} (first request)"
        protocol = exchange.protocol or "responses"
        if self.opening is Opening.RESET:
            return NoAnswer(Ending.RESET, label)
        if self.opening is Opening.SILENCE:
            return NoAnswer(Ending.STALL, label)
        status, body = opening_error(protocol, self.opening)
        headers = (("retry-after", "1"),) if self.opening is Opening.RATE_LIMIT else ()
        return WholeReply(body, status, label, headers=headers)


def opening_error(protocol: str, opening: Opening) -> tuple[int, dict[str, Any]]:
    """The protocol's rate-limit (429) or server error (500) as its provider sends it: its
    status and body. Gemini's 429 names a per-minute quota and a one-second `RetryInfo`
    (a daily quota would say the 429 is final)."""
    limited = opening is Opening.RATE_LIMIT
    error: dict[str, Any]
    if protocol == "anthropic":
        if limited:
            error = {
                "type": "rate_limit_error",
                "message": "Number of requests has exceeded your per-minute rate limit (hostile)",
            }
            return 429, {"type": "error", "error": error}
        return 500, {
            "type": "error",
            "error": {"type": "api_error", "message": "Internal server error (hostile)"},
        }
    if protocol == "gemini":
        if limited:
            details = [
                {
                    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [
                        {
                            "quotaMetric": "generativelanguage.googleapis.com/"
                            "generate_content_free_tier_requests",
                            "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                            "quotaValue": "10",
                        }
                    ],
                },
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"},
            ]
            message = "You exceeded your current quota (hostile). Please retry in 1s."
            error = {
                "code": 429,
                "message": message,
                "status": "RESOURCE_EXHAUSTED",
                "details": details,
            }
            return 429, {"error": error}
        message = "An internal error has occurred (hostile)."
        return 500, {"error": {"code": 500, "message": message, "status": "INTERNAL"}}
    if limited:
        error = {
            "message": "Rate limit reached for requests per min (hostile). Please try again in 1s.",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
        return 429, {"error": error}
    error = {
        "message": "The server had an error while processing your request (hostile).",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    return 500, {"error": error}


def responder_for(
    outcome: Outcome, command: str, pause: float = 0.5, functions_namespace: bool = False
) -> Responder:
    """The server's answers for `outcome`: `HostileResponder`, or for an opening fault an
    `OpeningFaultResponder` in front of the complete response."""
    opening = outcome.opening
    if opening is None:
        return HostileResponder(outcome, command, pause, functions_namespace)
    complete = HostileResponder(Outcome.COMPLETE, command, pause, functions_namespace)
    return OpeningFaultResponder(outcome.value, opening, complete)
