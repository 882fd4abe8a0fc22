"""Custom tools' declared input formats, checked with the engine the provider constrains
them with.

A Responses custom (free-form) tool declares what its input may be:
`{"type": "text"}` (or no `format`): any text; `{"type": "grammar", "syntax": "lark" |
"regex", "definition": "…"}`: text of that grammar. OpenAI constrains the model's sampling of
such input with llguidance, so a complete input the provider produced is a sentence of the
grammar as llguidance reads it; an input that is not one was not produced under the
grammar, and the batch it is in is invalid. lockgate checks with the same engine: the
grammar compiled by llguidance (`LLMatcher.grammar_from_lark`, `grammar_from_regex`, the
regex a whole-input rule, as the provider's) over a byte-level vocabulary (one token per
byte), the input's UTF-8 bytes consumed, and the matcher then in an accepting state: the
language of a grammar does not depend on the tokenizer, only how a model walks it.

A grammar the checker cannot use — llguidance refuses it, it is larger than
`MAX_DEFINITION_CHARS`, it counts model tokens or names them by number (`max_tokens`,
`<[42]>`, which mean other things over bytes), or the format is of a type not
known here — is the rule of an unusable schema: named (`format_problem`), that tool's input
then accepted as any text, and the proxy says so once.

Each distinct grammar is compiled once (about 1 ms for Codex's) and kept (at most
`_KEPT`, the earliest forgotten first); a check copies the compiled matcher (under a
microsecond) and feeds it the input (under 1 µs a byte for Codex's grammars: 16,000
characters in about 10 ms). A check that takes longer than `MAX_CHECK_SECONDS` refuses the
input.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llguidance import LLMatcher, LLTokenizer

__all__ = [
    "MAX_CHECK_SECONDS",
    "MAX_DEFINITION_CHARS",
    "GrammarCheck",
    "InputFormat",
    "grammar_check",
    "input_format",
    "prepare",
]

MAX_DEFINITION_CHARS = 65_536
MAX_CHECK_SECONDS = 2.0  # an input that takes longer to check is refused (fail closed)
SYNTAXES = ("lark", "regex")
_KEPT = 256
# The input is fed in pieces of this size, the time checked between them: small, since one
# piece of a pathological grammar can take seconds (an ambiguous one took 8.7 s for 400
# bytes fed at once; in pieces of 16 the check stops at the bound, 2.1 s), and feeding in
# pieces costs nothing that shows on real inputs (Codex's exec, 15,000 bytes: 4 → 5 ms).
_CHUNK_BYTES = 16
# What in a Lark grammar counts or names the model's tokens by number, whose meaning over
# bytes differs (llguidance itself refuses a named special token, `<|end|>`, over bytes).
_TOKEN_COUNTING = re.compile(r"max_tokens|<\[")


@dataclass(frozen=True, slots=True)
class InputFormat:
    """A grammar a custom tool's input must be a sentence of."""

    syntax: str  # "lark" | "regex"
    definition: str


def input_format(declared: object) -> tuple[InputFormat | None, str | None]:
    """What a custom tool's declared `format` asks of its input: (the grammar, None); (None,
    None) for any text (no format, `{"type": "text"}`); (None, why) for a format the gate
    cannot check with (its input is then accepted as any text)."""
    if declared is None:
        return None, None
    if not isinstance(declared, Mapping):
        return None, "the format is not a JSON object"
    kind = declared.get("type")
    if kind == "text":
        return None, None
    if kind != "grammar":
        return None, f"format type {str(kind)[:40]!r} is not one the gate knows"
    syntax, definition = declared.get("syntax"), declared.get("definition")
    if syntax not in SYNTAXES:
        return None, f"grammar syntax {str(syntax)[:40]!r} is not lark or regex"
    if not isinstance(definition, str):
        return None, "the grammar has no definition"
    assert isinstance(syntax, str)
    found = InputFormat(syntax, definition)
    checked = grammar_check(found)
    return (None, checked) if isinstance(checked, str) else (found, None)


class GrammarCheck:
    """One compiled grammar: whether a whole input is a sentence of it."""

    __slots__ = ("_lock", "_matcher", "syntax")

    def __init__(self, matcher: LLMatcher, syntax: str) -> None:
        self._matcher = matcher
        self._lock = threading.Lock()
        self.syntax = syntax

    def problem(self, text: str) -> str | None:
        """Why `text` is not a sentence of the grammar (None: it is one)."""
        with self._lock:  # the kept matcher is shared by every gate that checks with it
            matcher = self._matcher.deep_copy()
        data = text.encode("utf-8", "surrogatepass")
        started = time.monotonic()
        for start in range(0, len(data), _CHUNK_BYTES):
            if start and time.monotonic() - started > MAX_CHECK_SECONDS:
                return f"could not be checked against its {self.syntax} grammar in time"
            if not matcher.consume_tokens(list(data[start : start + _CHUNK_BYTES])):
                if "max is" in (matcher.get_error() or ""):  # llguidance's own bound
                    return (
                        f"could not be checked against its {self.syntax} grammar (too "
                        "ambiguous for llguidance's bounds)"
                    )
                return f"does not match its {self.syntax} grammar"
        if not matcher.is_accepting():
            return f"does not match its {self.syntax} grammar (the input is incomplete)"
        return None


_tokenizer: LLTokenizer | None = None
_kept: dict[tuple[str, str], GrammarCheck | str] = {}
_lock = threading.Lock()


class _Bytes:
    """A vocabulary of one token per byte, and an end token (`TokenizerWrapper`'s shape)."""

    def __init__(self) -> None:
        self.eos_token_id = 256
        self.bos_token_id = None
        self.tokens = [bytes([value]) for value in range(256)] + [b"<end>"]
        self.special_token_ids = [256]

    def __call__(self, text: bytes | str) -> list[int]:
        return list(text.encode("utf-8") if isinstance(text, str) else text)


def _byte_tokenizer() -> LLTokenizer:
    global _tokenizer
    if _tokenizer is None:
        from llguidance import LLTokenizer, TokenizerWrapper

        _tokenizer = LLTokenizer(TokenizerWrapper(_Bytes()), slices=[])
    return _tokenizer


def prepare() -> None:
    """Load llguidance and build the byte vocabulary now (about 160 ms, once per process),
    so that the first request declaring a grammar does not pay it on a server's event
    loop."""
    _byte_tokenizer()


def grammar_check(found: InputFormat) -> GrammarCheck | str:
    """The compiled check of a grammar, or why the gate cannot check with it; kept per
    distinct grammar (a proxy builds a gate per request, and a client declares the same
    tools with every one)."""
    key = (found.syntax, found.definition)
    with _lock:
        kept = _kept.get(key)
        if kept is not None:
            return kept
        compiled = _compile(found)
        if len(_kept) >= _KEPT:
            del _kept[next(iter(_kept))]
        _kept[key] = compiled
        return compiled


def _compile(found: InputFormat) -> GrammarCheck | str:
    if len(found.definition) > MAX_DEFINITION_CHARS:
        return f"the grammar is larger than {MAX_DEFINITION_CHARS} characters"
    if found.syntax == "lark" and _TOKEN_COUNTING.search(found.definition):
        return "the grammar counts or names the model's tokens"
    from llguidance import LLMatcher

    if found.syntax == "lark":
        grammar = LLMatcher.grammar_from_lark(found.definition)
    else:
        grammar = LLMatcher.grammar_from_regex(found.definition)
    tokenizer = _byte_tokenizer()
    error = LLMatcher.validate_grammar(grammar, tokenizer)
    if error:
        return f"llguidance cannot use the {found.syntax} grammar ({_first_line(error)})"
    matcher = LLMatcher(tokenizer, grammar, log_level=0)
    if matcher.is_error():
        return (
            f"llguidance cannot use the {found.syntax} grammar ({_first_line(matcher.get_error())})"
        )
    return GrammarCheck(matcher, found.syntax)


def _first_line(error: str) -> str:
    return error.strip().splitlines()[0][:200] if error.strip() else "no reason given"
