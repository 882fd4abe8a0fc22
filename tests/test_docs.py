"""The README's and `docs/`'s promises that can be checked mechanically.

Their examples run as written: the README's shell examples (every `lockgate …` command, each
port replaced by a free one, a command ending in `&` started in the background and waited
for until it listens), the Python examples against a loopback server, the team config
through `--check`, the pytest plugin example in a pytest of its own. The lab's scenario table
is the lab's own order, every registered provider is documented, and every relative link
leads to a file and heading that exist.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lockgate.lab.scenarios import SCENARIOS
from lockgate.providers import PROVIDERS
from lockgate.scripted.scenario import text_turn
from lockgate.scripted.script import load_script

from .helpers import ROOT, ServerThread, dead_port, wait_until

DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))]


def page(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def block(text: str, info: str) -> str:
    """The fenced block whose info string is `info` (e.g. `python gated`)."""
    return text.split(f"```{info}\n", 1)[1].split("```", 1)[0]


def test_the_scenario_table_is_the_labs_own_order() -> None:
    lab = page("docs/lab.md")
    table = lab.split("The scenarios, in the order", 1)[1].split("## `lockgate serve", 1)[0]
    pattern = r"^\| `([a-z0-9-]+)`(?: \(http only\))? \| (all|[a-z, ]+) \|"
    rows = re.findall(pattern, table, re.M)
    assert [name for name, _ in rows] == [scenario.name for scenario in SCENARIOS]
    for (name, protocols), scenario in zip(rows, SCENARIOS, strict=True):
        expected = "all" if scenario.protocols is None else ", ".join(sorted(scenario.protocols))
        assert protocols == expected, name
        http_only = f"| `{name}` (http only) |" in lab
        assert http_only == (scenario.transports == frozenset({"http"})), name


def test_every_registered_provider_is_documented() -> None:
    cli = page("docs/cli.md")
    for name, entry in PROVIDERS.items():
        assert f"| `{name}`" in cli
        assert entry.key_variable in cli
        assert entry.default_model in cli


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", text, re.M)}


def test_every_relative_link_leads_somewhere() -> None:
    broken = []
    for source in PAGES:
        text = re.sub(r"```.*?```", "", source.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not checked offline
            file, _, anchor = target.partition("#")
            path = (source.parent / file).resolve() if file else source
            if not path.exists():
                broken.append(f"{source.name}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{source.name}: {target} (no such heading)")
    assert broken == []


def _run_against_chat(code: str, reply_id: str) -> subprocess.CompletedProcess[str]:
    """Run an example with OPENAI_BASE_URL at a scripted Chat server answering one text turn
    (`Hello.`)."""
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
    library = page("docs/library.md").split("## lockgate's own loop", 1)[1]
    result = _run_against_chat(block(library, "python"), "chatcmpl-readme")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("()")  # a text answer: no tool calls
    assert "DecisionReady" in result.stdout


def test_the_script_example_is_a_valid_script() -> None:
    turns = load_script(block(page("docs/lab.md"), "json")).turns
    assert [turn.status for turn in turns] == [429, 200, 200]
    assert turns[1].connection_error
    assert turns[2].faults.line_ending == "crlf"


def test_the_transport_example_runs_as_written() -> None:
    result = _run_against_chat(block(page("docs/library.md"), "python gated"), "chatcmpl-gated")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello.\n"


def test_the_pytest_example_runs_as_written(tmp_path: Path) -> None:
    from lockgate.cassette.format import save

    from .cassette.recorded import recorded

    code = block(page("docs/lab.md"), "python pytest-example")
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


# --- the README's shell examples ------------------------------------------------------------


def _free_ports(text: str) -> str:
    """`text` with each port (`:NNNNN`, `--port NNNNN`) replaced by a free one."""
    ports = {port: str(dead_port()) for port in re.findall(r"(?:--port |:)(18\d\d\d)\b", text)}
    return re.sub(r"\b18\d\d\d\b", lambda m: ports.get(m.group(0), m.group(0)), text)


def _commands(shell: str) -> list[tuple[dict[str, str], list[str], bool]]:
    """Each command: its variable assignments, its words (`lockgate` → this interpreter's),
    and whether it runs in the background."""
    commands = []
    for line in shell.strip().splitlines():
        background = line.rstrip().endswith("&")
        words = shlex.split(line.rstrip().removesuffix("&"))
        variables = {}
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
            name, _, value = words.pop(0).partition("=")
            variables[name] = value
        assert words[0] == "lockgate", line
        commands.append((variables, [sys.executable, "-m", "lockgate", *words[1:]], background))
    return commands


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _alive(process: subprocess.Popen[bytes]) -> bool:
    return process.poll() is None


@contextmanager
def _shell_example(shell: str, cwd: Path) -> Iterator[list[subprocess.CompletedProcess[str]]]:
    """Run the example's commands in order, in `cwd`; the background ones stop at the end."""
    started: list[subprocess.Popen[bytes]] = []
    finished: list[subprocess.CompletedProcess[str]] = []
    try:
        for variables, words, background in _commands(shell):
            environment = {**os.environ, **variables}
            if background:
                process = subprocess.Popen(
                    words,
                    cwd=cwd,
                    env=environment,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                started.append(process)
                port = int(words[words.index("--port") + 1])
                wait_until(
                    functools.partial(_listening, port),
                    f"{words[3]} listens",
                    alive=functools.partial(_alive, process),
                )
            else:
                finished.append(
                    subprocess.run(
                        words,
                        cwd=cwd,
                        env=environment,
                        capture_output=True,
                        text=True,
                        timeout=120,
                        check=False,
                    )
                )
        yield finished
    finally:
        for process in started:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for process in started:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_the_readme_loop_example_runs_nothing_from_an_invalid_batch(tmp_path: Path) -> None:
    readme = page("README.md")
    with _shell_example(_free_ports(block(readme, "shell run-example")), tmp_path) as runs:
        (run,) = runs
    assert run.returncode == 1, run.stderr
    assert "stopped: provider_failure (invalid_batch:" in run.stdout
    assert "executed tools: 0" in run.stdout
    assert "sk-demo-key-1234" not in run.stdout + run.stderr


def test_the_readme_proxy_example_raises_and_shows_no_call(tmp_path: Path) -> None:
    readme = page("README.md")
    shell = block(readme, "shell proxy-example")
    client = block(readme, "python proxy-client")
    both = _free_ports(shell + "\n# client\n" + client)
    shell, client = both.split("\n# client\n", 1)
    with _shell_example(shell, tmp_path):
        result = subprocess.run(
            [sys.executable, "-c", client],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    printed = " ".join(result.stdout.split())
    stated = " ".join(readme.split("It prints `", 1)[1].split("`", 1)[0].split())
    assert printed == stated  # the README says what it prints, exactly
    assert "a call reached the client" not in result.stdout


def test_the_team_config_is_what_check_prints(tmp_path: Path) -> None:
    proxy = page("docs/proxy.md")
    config = block(proxy, "yaml team-config")
    token = tmp_path / "team-token"
    token.write_text("team-token-for-the-docs\n")
    (tmp_path / "team.yaml").write_text(config.replace("/etc/lockgate/team-token", str(token)))
    keys = {
        "ANTHROPIC_API_KEY": "sk-ant-docs-1",
        "OPENAI_API_KEY": "sk-docs-2",
        "AZURE_OPENAI_KEY": "azure-docs-3",
        "GEMINI_API_KEY": "gemini-docs-4",
    }
    result = subprocess.run(
        [sys.executable, "-m", "lockgate", "proxy", "--config", "team.yaml", "--check"],
        cwd=tmp_path,
        env={**os.environ, **keys},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    printed = result.stdout.replace(str(token), "/etc/lockgate/team-token").splitlines()
    shown = proxy.split("$ lockgate proxy --config team.yaml --check\n", 1)[1].split("```", 1)[0]
    documented = [line for line in shown.splitlines() if line and line != "…"]
    assert documented == printed[: len(documented)]
    assert not any(key in result.stdout for key in keys.values())
    routes = [line.split(":")[0] for line in printed if line.startswith("route ")]
    assert routes == ["route anthropic", "route openai", "route openai", "route gemini"]
    assert "fall-back 1 -> https://my-resource.openai.azure.com/openai" in result.stdout
