"""What the Chat Completions scenarios share (`scenarios_quirks.py`, `scenarios_faults.py`):
the fixture's arguments as JSON, `_edit` (the edit call most of them start from) and `_s`,
which names a scenario `chat-…`."""

from __future__ import annotations

import json
from typing import Any

from ...scripted.scenario import (
    EDIT_FIX,
    Expectation,
    Scenario,
)
from .render import ChunkBuilder

EDIT_JSON = json.dumps(EDIT_FIX)
READ_README = json.dumps({"path": "README.md"})


def _edit(builder: ChunkBuilder | None = None) -> ChunkBuilder:
    builder = builder or ChunkBuilder("chatcmpl-edit")
    return builder.start(None).call(0, "call_1", "edit", EDIT_JSON)


def _s(name: str, summary: str, expect: Expectation, turns: Any, **kw: Any) -> Scenario:
    return Scenario(f"chat-{name}", summary, expect, turns, **kw)
