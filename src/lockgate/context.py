"""Instructions: a base block, the tool catalog and the project's trusted guidance."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .conversation import ToolSpec

GUIDANCE_LIMIT_CHARS = 4_000

DIAGNOSE = (
    "You are a careful coding agent working in a small Python project. "
    "Use the tools to inspect the project, find the bug the README describes and explain "
    "the fix. You cannot edit files or run tests in this session."
)
REPAIR = (
    "You are a careful coding agent working in a small Python project. "
    "Use the tools to find the bug the README describes, fix it with a minimal edit, run the "
    "tests to verify the fix, then answer with a short summary."
)


def base_instructions(allow_execution: bool) -> str:
    return REPAIR if allow_execution else DIAGNOSE


def build_instructions(base: str, tools: Sequence[ToolSpec], project: Path) -> str:
    """Assemble the system instructions. AGENTS.md is trusted but size-bounded."""
    catalog = "\n".join(f"- {tool.name}: {tool.description}" for tool in tools)
    sections = [base, f"Available tools:\n{catalog}"]
    guidance_file = project / "AGENTS.md"
    if guidance_file.is_file() and not guidance_file.is_symlink():
        guidance = guidance_file.read_text(encoding="utf-8", errors="replace")
        if len(guidance) > GUIDANCE_LIMIT_CHARS:
            guidance = guidance[:GUIDANCE_LIMIT_CHARS] + "\n[guidance truncated]"
        sections.append(f"Project guidance (AGENTS.md):\n{guidance.strip()}")
    return "\n\n".join(sections)


DIAGNOSE_PROMPT = (
    "The project's README reports a bug in the calculator. Inspect the project and explain "
    "the cause and the fix."
)
REPAIR_PROMPT = "The project's README reports a bug in the calculator. Fix it and verify the fix."


def task_prompt(allow_execution: bool) -> str:
    return REPAIR_PROMPT if allow_execution else DIAGNOSE_PROMPT
