"""Mutations of a call's shape (not of the framing, which `differential.MUTATIONS` covers):
what the real readers were found to read otherwise than the gate. Both real-reader
differentials run them: the Python one (`real_differential.py`) and the JS one
(`interop/readers/run.py`, which labels a case `name: variant` and classes its findings so).

Each takes (random, protocol, body, request) and returns the mutated (body, request), or
None where it does not apply; some add a tool to the request (a custom tool with a grammar,
a namespace, a client-executed built-in tool) so that the call they add can be accepted.

- `json in arguments`: one call's whole argument text rewritten (Chat, Responses,
  Anthropic: in its first fragment, the others emptied and, for Responses, every later
  statement of it too; Gemini: the `args` object of the event itself) with NaN or
  Infinity, a duplicate key (the decoy first or last), an integer beyond 2⁵³ or 1e400, or a
  lone surrogate (an escape in the argument text, or a raw one in the event's string).
- `chat index`: a Chat call's `index` null, missing on one fragment beside indexed calls, a
  new id at an index in use, indexes with gaps, reversed or negative.
- `chat repeated fragment`: a Chat call's first fragment (id and name, or one of them) sent
  again, identical.
- `anthropic start input`: a `tool_use` start with a non-empty `input`, its deltas kept or
  dropped.
- `responses no done`: a function call's `output_item.done` (and its `arguments.done`)
  dropped.
- `responses output null`: `response.completed` with `output: null` (the SDK's final
  response is then the `.done` items), a `.done` dropped, altered, or one more.
- `responses custom tool`, `responses namespace`, `responses built-in item`: a custom tool
  call (its grammar met or not), a call in a namespace (the declared one or another), a
  client-executed `local_shell_call` (its tool declared or not), added before
  `response.completed` and listed in its output.
- `gemini parts`: a `functionCall` part added to the finishing chunk, beside text in one
  part, in a thought part, without a name, with `args` null, or in a second candidate.

`KNOWN` names the mutations whose findings are known and being fixed elsewhere (the test
lists them apart; they must disappear once the fixes are merged).

The package's modules: `events` (what the shapes share), `arguments`, `chat_anthropic`,
`responses`, `gemini` (the shapes) and `catalog` (`SHAPES`, `KNOWN`); every name is imported
from here.
"""

from __future__ import annotations

from .arguments import json_in_arguments
from .catalog import KNOWN, SHAPES
from .chat_anthropic import anthropic_start_input, chat_index, chat_repeated_fragment
from .events import Change, Mutated, Request, Shape
from .gemini import gemini_parts
from .responses import custom_grammar_violation, responses_no_done, responses_output_null

__all__ = [
    "KNOWN",
    "SHAPES",
    "Change",
    "Mutated",
    "Request",
    "Shape",
    "anthropic_start_input",
    "chat_index",
    "chat_repeated_fragment",
    "custom_grammar_violation",
    "gemini_parts",
    "json_in_arguments",
    "responses_no_done",
    "responses_output_null",
]
