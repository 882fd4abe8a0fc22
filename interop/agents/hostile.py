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
"""

from __future__ import annotations

from dataclasses import dataclass

from .outcomes import Ending, Outcome
from .server import Exchange, Reply, StreamReply, WholeReply, text_reply
from .tools import has_tool_result, shell_calls
from .wire import Call, Script, whole_calls, whole_error

__all__ = ["HostileResponder"]


@dataclass(frozen=True)
class HostileResponder:
    outcome: Outcome
    command: str  # the shell command that creates the marker
    pause: float = 0.5  # seconds after each call before what follows it
    functions_namespace: bool = False  # name Codex's `functions` namespace in its calls

    def __call__(self, exchange: Exchange) -> Reply:
        body = exchange.json_body()
        protocol = exchange.protocol
        if body is None or protocol is None:
            return text_reply(exchange)
        if has_tool_result(protocol, body):
            return text_reply(exchange)
        calls = shell_calls(
            protocol, body, self.command, functions_namespace=self.functions_namespace
        )
        if calls is None:
            return text_reply(exchange)
        model = body.get("model")
        model_name = model if isinstance(model, str) else "hostile-model"
        outcome = self.outcome
        script_calls: tuple[Call, ...] = (calls.run,)
        if outcome is Outcome.SECOND_CALL_INVALID:
            script_calls = (calls.run, calls.invalid)
        elif outcome is Outcome.SECOND_CALL_UNKNOWN:
            script_calls = (calls.run, calls.undeclared)
        script = Script(
            calls=script_calls,
            cut=outcome is Outcome.EOF_INSIDE_ARGS,
            terminal=outcome.terminal,
            model=model_name,
        )
        label = f"{outcome.value}: {calls.run.name}" + (
            f" + {script_calls[1].name}" if len(script_calls) > 1 else ""
        )
        if exchange.streaming():
            return StreamReply(script, outcome.ending, self.pause, label)
        return _whole(protocol, script, outcome, exchange.serial, f"{label} (whole)")


def _whole(protocol: str, script: Script, outcome: Outcome, serial: int, label: str) -> Reply:
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
