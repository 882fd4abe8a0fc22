"""The README's promises that can be checked mechanically.

Its scenario table lists every lab scenario in the order the lab runs them, every provider
is documented, its library example runs as written and its script example is a valid
script.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from lockgate.lab.scenarios import SCENARIOS
from lockgate.providers import PROVIDERS
from lockgate.scripted.scenario import text_turn
from lockgate.scripted.script import load_script

from .helpers import ROOT, ServerThread

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_scenario_table_is_the_labs_own_order() -> None:
    table = README.split("The scenarios, in the order", 1)[1].split("### `lockgate serve", 1)[0]
    pattern = r"^\| `([a-z0-9-]+)`(?: \(http only\))? \| (all|[a-z, ]+) \|"
    rows = re.findall(pattern, table, re.M)
    assert [name for name, _ in rows] == [scenario.name for scenario in SCENARIOS]
    for (name, protocols), scenario in zip(rows, SCENARIOS, strict=True):
        expected = "all" if scenario.protocols is None else ", ".join(sorted(scenario.protocols))
        assert protocols == expected, name
        http_only = f"| `{name}` (http only) |" in README
        assert http_only == (scenario.transports == frozenset({"http"})), name


def test_every_registered_provider_is_documented() -> None:
    for name, entry in PROVIDERS.items():
        assert f"| `{name}`" in README
        assert entry.key_variable in README
        assert entry.default_model in README


def _run_against_chat(code: str, reply_id: str) -> subprocess.CompletedProcess[str]:
    """Run a README example with OPENAI_BASE_URL at a scripted Chat server answering one
    text turn (`Hello.`)."""
    with ServerThread([text_turn(reply_id, "Hello.")], provider="chat") as running:
        environment = {
            **os.environ,
            "OPENAI_API_KEY": "sk-readme-example",
            "OPENAI_BASE_URL": running.base_url,
        }
        return subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=environment,
            timeout=60,
            check=False,
        )


def test_the_library_example_runs_as_written() -> None:
    code = README.split("## Using the library\n\n```python\n", 1)[1].split("```", 1)[0]
    result = _run_against_chat(code, "chatcmpl-readme")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("()")  # a text answer: no tool calls
    assert "DecisionReady" in result.stdout


def test_readme_script_example_is_a_valid_script() -> None:
    block = README.split("```json\n", 1)[1].split("```", 1)[0]
    turns = load_script(block).turns
    assert [turn.status for turn in turns] == [429, 200, 200]
    assert turns[1].connection_error
    assert turns[2].faults.line_ending == "crlf"


def test_the_transport_example_runs_as_written() -> None:
    code = README.split("```python gated\n", 1)[1].split("```", 1)[0]
    result = _run_against_chat(code, "chatcmpl-gated")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello.\n"


def test_the_pytest_example_runs_as_written(tmp_path: Path) -> None:
    from lockgate.cassette.format import save

    from .cassette.recorded import recorded

    code = README.split("```python pytest-example\n", 1)[1].split("```", 1)[0]
    (tmp_path / "tests" / "cassettes").mkdir(parents=True)
    save(recorded("chat"), tmp_path / "tests" / "cassettes" / "edit.cassette.jsonl")
    (tmp_path / "test_example.py").write_text(code, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
