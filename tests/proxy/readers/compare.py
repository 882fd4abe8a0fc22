"""Every reader with the protocols it reads, and comparing what they read of the same bytes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .base import _ALL, _GEMINI, Chunks, Reader, ReadEvent, _same_json
from .in_python import (
    read_anthropic_python,
    read_genai_aiohttp,
    read_genai_python,
    read_json_lines,
    read_litellm_anthropic,
    read_lockgate,
    read_openai_python,
    read_splitlines_data_lines,
    read_splitlines_events,
    read_whatwg,
)
from .typescript import read_anthropic_node, read_genai_node, read_openai_node

READERS: tuple[Reader, ...] = (
    Reader("lockgate", read_lockgate, True, _ALL),
    Reader("whatwg", read_whatwg, True, _ALL),
    Reader("openai-python", read_openai_python, True, _ALL),
    Reader("anthropic-python", read_anthropic_python, True, _ALL),
    Reader("openai-node", read_openai_node, True, _ALL),
    Reader("anthropic-node", read_anthropic_node, True, _ALL),
    Reader("splitlines-events", read_splitlines_events, True, _ALL),
    Reader("splitlines-data-lines", read_splitlines_data_lines, False, _ALL),
    Reader("litellm-anthropic", read_litellm_anthropic, False, frozenset({"anthropic"})),
    Reader("json-lines", read_json_lines, False, _ALL, compared=False),
    Reader("google-genai-python", read_genai_python, False, _GEMINI),
    Reader("google-genai-aiohttp", read_genai_aiohttp, False, _GEMINI),
    Reader("google-genai-node", read_genai_node, False, _GEMINI),
)


def readers_for(protocol: str) -> tuple[Reader, ...]:
    return tuple(reader for reader in READERS if protocol in reader.protocols)


def read_all(protocol: str, chunks: Chunks) -> dict[str, list[ReadEvent]]:
    """What every reader of the protocol reads in the same reads."""
    return {reader.name: reader.read(chunks) for reader in readers_for(protocol)}


# --- comparing readers --------------------------------------------------------------------------


def payloads(
    events: Sequence[ReadEvent], *, arrays: bool = False
) -> list[tuple[str | None, dict[str, Any]]]:
    """The events whose data is a JSON object, parsed (the name kept); with `arrays`, also
    each object of an event whose data is a JSON array (Gemini's answer to a stream request
    without `alt=sse`: an array of its chunks)."""
    found = []
    for event in events:
        try:
            value = json.loads(event.data)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append((event.event, value))
        elif arrays and isinstance(value, list):
            found.extend((event.event, item) for item in value if isinstance(item, dict))
    return found


def disagreements(protocol: str, reads: Mapping[str, Sequence[ReadEvent]]) -> list[str]:
    """How the readers of a protocol disagree with lockgate's reading (`reads`: what each
    read, from `read_all`; empty: they agree): a reader of names must read the same (name,
    data) sequence; a data-line reader the same JSON objects in the same order (a reader
    of JSON answers is not compared: it reads no SSE)."""
    reference = list(reads["lockgate"])
    objects = [_same_json(value) for _, value in payloads(reference)]
    problems = []
    for reader in readers_for(protocol):
        if reader.name == "lockgate" or not reader.compared or reader.name not in reads:
            continue
        events = list(reads[reader.name])
        if reader.names:
            if events != reference:
                problems.append(f"{reader.name} reads {events!r}, lockgate {reference!r}")
        else:
            seen = [_same_json(value) for _, value in payloads(events)]
            if seen != objects:
                problems.append(f"{reader.name} reads objects {seen!r}, lockgate {objects!r}")
    return problems
