"""A scripted reply, described once and rendered by each protocol as its own native bytes.

A `Reply` says what the model sends (text, reasoning, refusals, calls, provider-side tool
work) and how the stream ends; each provider's lab renderer (`providers/<name>/render.py`)
turns it into that protocol's events, with the ids, indexes, fragments and terminal events
the live API sends. Faults (`script.Faults`) then shape the bytes, the same for every
protocol.

Some parts only the Responses protocol has (`responses_only`): a call in a tool `namespace`,
a custom (free-form) tool call, a `shell_call` the client executes itself, a `compaction`
item. The other protocols' renderers refuse to render them (ValueError), and the scenarios
that use them run on Responses only. lockgate's own loop declares none of those tools and
refuses their calls (`unsupported_output`, `invalid_batch`); a client that declares them
may run them (see `scenario.OtherClient`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class Say:
    """Answer text, streamed in `pieces` deltas."""

    text: str
    pieces: int = 4


@dataclass(frozen=True, slots=True)
class Think:
    """Reasoning, streamed in `pieces` deltas; `opaque` is the provider's sealed part
    (Responses encrypted content, Anthropic signature), which must come back unchanged."""

    text: str
    opaque: str = "sealed-reasoning-do-not-touch"
    pieces: int = 3


@dataclass(frozen=True, slots=True)
class Refuse:
    """A refusal, kept apart from answer text."""

    text: str


@dataclass(frozen=True, slots=True)
class Call:
    """A function call. `cut=True`: the stream stops inside its arguments (after about half
    of them), and nothing of the reply after it is sent. `namespace`: the group of tools
    its name belongs to (Responses `namespace` tools; "" for none)."""

    call_id: str
    name: str
    arguments: str | Mapping[str, Any] = "{}"
    pieces: int = 5
    cut: bool = False
    namespace: str = ""

    @property
    def argument_text(self) -> str:
        return argument_text(self.arguments)

    @property
    def sent_argument_text(self) -> str:
        """The argument text a stream of this call sends: all of it, or for a cut call the
        fragments sent before the cut (not valid JSON). A whole answer states the same."""
        if not self.cut:
            return self.argument_text
        return "".join(argument_pieces(self.argument_text, self.pieces, cut=True))


@dataclass(frozen=True, slots=True)
class CustomCall:
    """A call of a custom (free-form) tool (Responses `custom_tool_call`): its `input` is
    any text, streamed in `pieces` deltas. `cut=True`: the stream stops inside the input
    (after about half of it), and nothing of the reply after it is sent. `namespace`: as a
    function call's."""

    call_id: str
    name: str
    input: str
    pieces: int = 4
    cut: bool = False
    namespace: str = ""

    @property
    def sent_input(self) -> str:
        """The input a stream of this call sends: all of it, or for a cut call the
        fragments sent before the cut."""
        return "".join(argument_pieces(self.input, self.pieces, cut=self.cut))


@dataclass(frozen=True, slots=True)
class ShellCall:
    """A call of the built-in shell tool that the client executes itself (Responses
    `shell_call`): its `commands`, stated whole when the item is done."""

    call_id: str
    commands: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Compaction:
    """The provider's compaction of the conversation so far (Responses `compaction`):
    provider output, opaque (`opaque`, which must come back unchanged), never a call."""

    opaque: str = "gAAAAB-compacted-history-do-not-touch=="


@dataclass(frozen=True, slots=True)
class ProviderTool:
    """Work the provider did itself (a web search): provider-side output, never a local
    call. Protocols without such tools do not run scenarios that use it."""

    query: str


@dataclass(frozen=True, slots=True)
class Broken:
    """A text event whose JSON is cut off (a malformed frame)."""


Part = Say | Think | Refuse | Call | CustomCall | ShellCall | Compaction | ProviderTool | Broken


def responses_only(part: Part) -> str | None:
    """What a part only the Responses protocol expresses is (None: every protocol can)."""
    if isinstance(part, Call):
        return "a call in a tool namespace" if part.namespace else None
    if isinstance(part, CustomCall):
        return "a custom (free-form) tool call"
    if isinstance(part, ShellCall):
        return "a client-executed shell_call"
    if isinstance(part, Compaction):
        return "a compaction item"
    return None


# complete: the protocol's terminal success; truncated: cut by the output-token limit;
# error: the provider's in-stream error event; failed: the response reported failed;
# paused: the provider paused its own work (Anthropic pause_turn); open: no terminal event
# at all (the faults decide how the body ends).
Ending = Literal["complete", "truncated", "error", "failed", "paused", "open"]


@dataclass(frozen=True, slots=True)
class ReplyUsage:
    """Token usage in lockgate's terms (`conversation.Usage`); each protocol renders it in
    its own (e.g. Anthropic's input excludes cached tokens)."""

    input_tokens: int = 320
    cached_input_tokens: int = 0
    output_tokens: int = 40
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


LAB_MODEL = "lab-model"  # the model name every lab reply and request uses unless told


@dataclass(frozen=True, slots=True)
class Reply:
    response_id: str
    parts: tuple[Part, ...] = ()
    ending: Ending = "complete"
    usage: ReplyUsage | None = field(default_factory=ReplyUsage)
    model: str = LAB_MODEL
    error_code: str = "server_error"  # for `error` / `failed` endings
    error_message: str = "The server had an error while processing your request."

    @property
    def calls(self) -> tuple[Call, ...]:
        """The function calls (custom and shell calls are not among them)."""
        return tuple(part for part in self.parts if isinstance(part, Call))

    @property
    def sent_parts(self) -> tuple[Part, ...]:
        """The parts actually sent: everything up to and including a cut call (a function
        call or a custom tool call)."""
        sent: list[Part] = []
        for part in self.parts:
            sent.append(part)
            if isinstance(part, Call | CustomCall) and part.cut:
                break
        return tuple(sent)


def split(text: str, pieces: int) -> list[str]:
    """`text` in about `pieces` consecutive pieces (none for empty text)."""
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, pieces)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def argument_text(arguments: str | Mapping[str, Any]) -> str:
    """A call's argument bytes: a string as it is, an object as JSON."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def argument_pieces(text: str, pieces: int, *, cut: bool = False) -> list[str]:
    """The argument fragments a renderer streams; `cut`: only about the first half (a call
    cut off mid-arguments)."""
    sent = split(text, pieces)
    return sent[: max(1, len(sent) // 2)] if cut else sent


ErrorKind = Literal[
    "auth", "quota", "rate_limit", "overloaded", "server", "unavailable", "exhausted", "invalid"
]


@dataclass(frozen=True, slots=True)
class OpeningError:
    """An HTTP error while opening, described neutrally; each protocol writes its own
    error body (`code`/`type`) for the kind."""

    status: int
    kind: ErrorKind
    message: str
    reset_seconds: float | None = None  # the protocol's reset headers: requests exhausted
