"""The disposable repair fixture and the tools that work on it.

The fixture is a tiny project with a bug (`add` subtracts). Its tools can only touch a fixed
set of files inside the fixture directory; the executor re-validates every call on its own,
whatever the provider promised, and refuses side effects without explicit permission.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from .conversation import ToolCall, ToolSpec
from .tools import ToolError

CALCULATOR = "def add(a, b):\n    return a - b\n"

TEST_CALCULATOR = """import unittest

from calculator import add


class AddTest(unittest.TestCase):
    def test_adds_positive_numbers(self):
        self.assertEqual(add(2, 3), 5)

    def test_adds_negative_numbers(self):
        self.assertEqual(add(-2, -3), -5)


if __name__ == "__main__":
    unittest.main()
"""

README = """# calculator

A one-function calculator library.

## Known bug

`add(2, 3)` returns `-1` instead of `5`: `add` subtracts its arguments. The unit tests in
`test_calculator.py` show the failure.
"""

AGENTS = """# Project guidance

- Keep changes minimal: fix the bug where it is, do not restructure the project.
- Run the unit tests after any change to the code.
- Do not edit the tests to make them pass.
"""

FIXTURE_FILES: Mapping[str, str] = {
    "calculator.py": CALCULATOR,
    "test_calculator.py": TEST_CALCULATOR,
    "README.md": README,
    "AGENTS.md": AGENTS,
}

READ_LIMIT_CHARS = 12_000
TEST_OUTPUT_LIMIT_CHARS = 8_000
TEST_TIMEOUT_SECONDS = 30.0


def _string_parameters(**descriptions: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            name: {"type": "string", "description": text} for name, text in descriptions.items()
        },
        "required": list(descriptions),
        "additionalProperties": False,
    }


DISCOVER = ToolSpec("discover", "List the project's readable files.")
READ = ToolSpec(
    "read",
    "Read one project file (output is bounded; a truncation note says when).",
    _string_parameters(path="A file name returned by discover."),
)
EDIT = ToolSpec(
    "edit",
    "Replace the exact text `old` with `new` in one file; `old` must occur exactly once.",
    _string_parameters(
        path="A file name returned by discover.",
        old="The exact text to replace (must occur exactly once).",
        new="The replacement text.",
    ),
)
TEST = ToolSpec("test", "Run the project's unit tests and return their output.")

READ_ONLY_TOOLS: tuple[ToolSpec, ...] = (DISCOVER, READ)
ALL_TOOLS: tuple[ToolSpec, ...] = (DISCOVER, READ, EDIT, TEST)
SIDE_EFFECT_TOOLS = frozenset({"edit", "test"})
PERMISSION_ERROR = "edits and test execution require --allow-execution"


def create_fixture(parent: Path) -> Path:
    """Write a fresh fixture project into a new directory below `parent`."""
    root = Path(tempfile.mkdtemp(prefix="lockgate-fixture-", dir=parent))
    for name, text in FIXTURE_FILES.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def exposed_tools(allow_execution: bool) -> tuple[ToolSpec, ...]:
    return ALL_TOOLS if allow_execution else READ_ONLY_TOOLS


class FixtureTools:
    """The four fixture tools, confined to the fixture's fixed file set."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _file(self, path: str) -> Path:
        if path not in FIXTURE_FILES:
            allowed = ", ".join(sorted(FIXTURE_FILES))
            raise ToolError(f"unknown file {path!r}; readable files: {allowed}")
        candidate = self.root / path
        if candidate.is_symlink() or not candidate.is_file():
            raise ToolError(f"{path} is not a regular file in the project")
        if candidate.resolve().parent != self.root:
            raise ToolError(f"{path} resolves outside the project")
        return candidate

    def discover(self) -> str:
        names = [
            name
            for name in sorted(FIXTURE_FILES)
            if (self.root / name).is_file() and not (self.root / name).is_symlink()
        ]
        return "\n".join(names)

    def read(self, path: str) -> str:
        text = self._file(path).read_text(encoding="utf-8", errors="replace")
        if len(text) <= READ_LIMIT_CHARS:
            return text
        return (
            text[:READ_LIMIT_CHARS]
            + f"\n[truncated: showing {READ_LIMIT_CHARS} of {len(text)} characters]"
        )

    def edit(self, path: str, old: str, new: str) -> str:
        target = self._file(path)
        text = target.read_text(encoding="utf-8")
        if not old:
            raise ToolError("old text must not be empty")
        count = text.count(old)
        if count != 1:
            raise ToolError(f"old text occurs {count} times in {path}; it must occur exactly once")
        replaced = text.replace(old, new, 1)
        try:
            encoded = replaced.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError("the new text cannot be encoded as UTF-8 (a lone surrogate)") from None
        _write_atomically(target, encoded)
        return f"edited {path}: replaced {len(old)} characters with {len(new)}"

    async def test(self) -> str:
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONDONTWRITEBYTECODE": "1"}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "unittest",
            "discover",
            "-s",
            str(self.root),
            "-t",
            str(self.root),
            "-p",
            "test_*.py",
            cwd=self.root,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            output, _ = await asyncio.wait_for(process.communicate(), TEST_TIMEOUT_SECONDS)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise ToolError(f"tests timed out after {TEST_TIMEOUT_SECONDS:g} s") from None
        except asyncio.CancelledError:
            process.kill()
            await process.wait()
            raise
        text = output.decode("utf-8", "replace")
        if len(text) > TEST_OUTPUT_LIMIT_CHARS:
            text = text[-TEST_OUTPUT_LIMIT_CHARS:] + "\n[truncated: showing the last part]"
        return f"exit status {process.returncode}\n{text}"


def _write_atomically(target: Path, data: bytes) -> None:
    """Write to a temporary file beside the target, keep the target's permission bits, then
    replace it in one step: never a half-written file."""
    mode = target.stat().st_mode & 0o7777
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".edit-", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class FixtureExecutor:
    """Validates each call again, applies the host permission gate, then runs the tool."""

    def __init__(
        self,
        tools: FixtureTools,
        *,
        allow_execution: bool,
        specs: Sequence[ToolSpec] = ALL_TOOLS,
    ) -> None:
        self.tools = tools
        self.allow_execution = allow_execution
        self._validators = {
            spec.name: Draft202012Validator(dict(spec.parameters)) for spec in specs
        }
        self.executed: list[ToolCall] = []

    async def execute(self, call: ToolCall) -> str:
        validator = self._validators.get(call.name)
        if validator is None:
            raise ToolError(f"unknown tool {call.name!r}")
        problems = sorted(validator.iter_errors(dict(call.arguments)), key=str)
        if problems:
            raise ToolError(f"invalid arguments for {call.name}: {problems[0].message}")
        if call.name in SIDE_EFFECT_TOOLS and not self.allow_execution:
            raise ToolError(PERMISSION_ERROR)
        self.executed.append(call)
        arguments = call.arguments
        if call.name == "discover":
            return self.tools.discover()
        if call.name == "read":
            return self.tools.read(str(arguments["path"]))
        if call.name == "edit":
            return self.tools.edit(
                str(arguments["path"]), str(arguments["old"]), str(arguments["new"])
            )
        return await self.tools.test()
