"""The instructions (`context.py`): the tool catalogue and the project's bounded guidance."""

from __future__ import annotations

from pathlib import Path

from lockgate.context import GUIDANCE_LIMIT_CHARS, build_instructions
from lockgate.fixture import ALL_TOOLS, create_fixture


def test_instructions_include_catalog_and_bounded_guidance(tmp_path: Path) -> None:
    project = create_fixture(tmp_path)
    text = build_instructions("BASE", ALL_TOOLS, project)
    assert text.startswith("BASE")
    for tool in ALL_TOOLS:
        assert f"- {tool.name}: {tool.description}" in text
    assert "Do not edit the tests" in text
    (project / "AGENTS.md").write_text("g" * (GUIDANCE_LIMIT_CHARS + 100))
    bounded = build_instructions("BASE", ALL_TOOLS, project)
    assert "g" * GUIDANCE_LIMIT_CHARS in bounded
    assert "g" * (GUIDANCE_LIMIT_CHARS + 1) not in bounded
    assert "[guidance truncated]" in bounded
