"""The tool-execution seam shared by the loop and every tool set."""

from __future__ import annotations

from typing import Protocol

from .conversation import ToolCall


class ToolError(Exception):
    """An expected tool failure; the loop turns it into an `error: …` observation."""


class ToolExecutor(Protocol):
    """Runs one call (re-validating it) and returns its observation text."""

    async def execute(self, call: ToolCall) -> str: ...
