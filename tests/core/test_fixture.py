"""The fixture project and its tools (`fixture.py`): paths, bounds, edits, permissions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lockgate.conversation import ToolCall
from lockgate.errors import FailureKind
from lockgate.fixture import (
    ALL_TOOLS,
    CALCULATOR,
    FIXTURE_FILES,
    PERMISSION_ERROR,
    READ_LIMIT_CHARS,
    READ_ONLY_TOOLS,
    FixtureExecutor,
    FixtureTools,
    create_fixture,
    exposed_tools,
)
from lockgate.lab.scenarios import FIXED_SOURCE
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.scripted.script import Turn
from lockgate.tools import ToolError

from ..helpers import (
    CLI,
    KEY,
    ascii_frames,
    failed_as,
    final_record,
    serve,
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return create_fixture(tmp_path)


def call(name: str, **arguments: str) -> ToolCall:
    return ToolCall(f"call_{name}", name, arguments)


def test_fixture_contents(project: Path) -> None:
    assert sorted(p.name for p in project.iterdir()) == sorted(FIXTURE_FILES)
    assert (project / "calculator.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert "bug" in (project / "README.md").read_text()


def test_discover_lists_regular_files_never_symlinks(project: Path) -> None:
    tools = FixtureTools(project)
    assert tools.discover().splitlines() == sorted(FIXTURE_FILES)
    (project / "AGENTS.md").unlink()
    (project / "AGENTS.md").symlink_to("/etc/passwd")
    assert "AGENTS.md" not in tools.discover().splitlines()
    with pytest.raises(ToolError, match="not a regular file"):
        tools.read("AGENTS.md")


@pytest.mark.parametrize(
    "path",
    ["../etc/passwd", "/etc/passwd", "./calculator.py", "sub/calculator.py", "secret.txt", ""],
)
def test_paths_cannot_escape_or_leave_the_fixed_set(project: Path, path: str) -> None:
    with pytest.raises(ToolError, match="unknown file"):
        FixtureTools(project).read(path)


def test_read_is_bounded_with_a_truncation_note(project: Path) -> None:
    (project / "README.md").write_text("x" * (READ_LIMIT_CHARS + 10))
    text = FixtureTools(project).read("README.md")
    assert text.startswith("x" * READ_LIMIT_CHARS)
    assert f"[truncated: showing {READ_LIMIT_CHARS} of {READ_LIMIT_CHARS + 10} characters]" in text
    assert FixtureTools(project).read("calculator.py") == CALCULATOR


def test_edit_requires_exactly_one_occurrence(project: Path) -> None:
    tools = FixtureTools(project)
    with pytest.raises(ToolError, match="occurs 0 times"):
        tools.edit("calculator.py", "return a * b", "x")
    (project / "calculator.py").write_text("a\na\n")
    with pytest.raises(ToolError, match="occurs 2 times"):
        tools.edit("calculator.py", "a", "b")
    assert (project / "calculator.py").read_text() == "a\na\n"


def test_edit_replaces_and_leaves_no_temporary_files(project: Path) -> None:
    FixtureTools(project).edit("calculator.py", "a - b", "a + b")
    assert (project / "calculator.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert sorted(p.name for p in project.iterdir()) == sorted(FIXTURE_FILES)


async def test_test_tool_runs_the_suite(project: Path) -> None:
    tools = FixtureTools(project)
    failing = await tools.test()
    assert failing.startswith("exit status 1")
    assert "FAILED" in failing
    tools.edit("calculator.py", "a - b", "a + b")
    passing = await tools.test()
    assert passing.startswith("exit status 0")
    assert "OK" in passing


async def test_test_tool_does_not_pass_secrets_to_model_chosen_code(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    (project / "test_calculator.py").write_text(
        "import os, unittest\nclass T(unittest.TestCase):\n    def test_env(self):\n"
        "        print('KEY=' + os.environ.get('OPENAI_API_KEY', 'absent'))\n"
    )
    output = await FixtureTools(project).test()
    assert "KEY=absent" in output


async def test_permission_gate_refuses_side_effects(project: Path) -> None:
    executor = FixtureExecutor(FixtureTools(project), allow_execution=False)
    for refused in (call("edit", path="calculator.py", old="a - b", new="a + b"), call("test")):
        with pytest.raises(ToolError, match=PERMISSION_ERROR):
            await executor.execute(refused)
    assert (project / "calculator.py").read_text() == CALCULATOR
    assert executor.executed == []
    assert "calculator.py" in await executor.execute(call("discover"))


async def test_executor_validates_names_and_arguments_again(project: Path) -> None:
    executor = FixtureExecutor(FixtureTools(project), allow_execution=True)
    with pytest.raises(ToolError, match="unknown tool"):
        await executor.execute(call("shell", command="ls"))
    with pytest.raises(ToolError, match="invalid arguments"):
        await executor.execute(call("read"))
    with pytest.raises(ToolError, match="invalid arguments"):
        await executor.execute(ToolCall("c", "read", {"path": 7}))
    with pytest.raises(ToolError, match="invalid arguments"):
        await executor.execute(call("read", path="README.md", extra="x"))
    assert executor.executed == []


def test_exposed_tools_depend_on_permission() -> None:
    assert exposed_tools(False) == READ_ONLY_TOOLS
    assert exposed_tools(True) == ALL_TOOLS
    assert [t.name for t in READ_ONLY_TOOLS] == ["discover", "read"]


def test_fixture_is_fresh_each_time(tmp_path: Path) -> None:
    first, second = create_fixture(tmp_path), create_fixture(tmp_path)
    assert first != second
    assert os.path.commonpath([first, tmp_path]) == str(tmp_path)


# --- file modes and lone surrogates ------------------------------------------------------


@pytest.mark.parametrize("mode", [0o644, 0o755, 0o600, 0o640])
def test_an_edit_keeps_the_file_mode(tmp_path: Path, mode: int) -> None:
    root = create_fixture(tmp_path)
    target = root / "calculator.py"
    target.chmod(mode)
    previous = os.umask(0o077)
    try:
        FixtureTools(root).edit("calculator.py", "return a - b", "return a + b")
    finally:
        os.umask(previous)
    assert target.read_text() == FIXED_SOURCE
    assert target.stat().st_mode & 0o7777 == mode
    assert [p.name for p in root.iterdir() if p.name.startswith(".edit-")] == []


@pytest.mark.parametrize("json_lines", [False, True], ids=["human", "json"])
def test_a_lone_surrogate_in_an_edit_is_an_invalid_batch(cli: CLI, json_lines: bool) -> None:
    # Readers disagree on a lone surrogate escape (`jsonlimits`): the gate refuses the call,
    # before the tool could fail on it.
    arguments = {"path": "calculator.py", "old": "return a - b", "new": "return a \ud800 b"}
    builder = ResponseBuilder("resp_sur").created().call("fc_1", "call_1", "edit", arguments)
    with serve([Turn(events=ascii_frames(builder.completed()))]) as server:
        result = cli(
            "run",
            "--base-url",
            server.base_url,
            "--allow-execution",
            *(["--json"] * json_lines),
            key=KEY,
        )
    assert "internal error" not in result.output
    if json_lines:
        assert result.code == 1
        final = final_record(result.out)
        assert (final["executed_tools"], final["source"]) == (0, CALCULATOR)
        stopped = final["stopped"]
    else:
        stopped = failed_as(result, FailureKind.INVALID_BATCH).stopped
    assert "lone surrogate" in stopped
