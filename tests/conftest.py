"""Fixtures shared by the test files: `lockgate.cli.main` in this process (`in_process_main`,
and `cli` on top of it), and the start-up marker for signalled child processes."""

from __future__ import annotations

import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import lockgate.cli as cli_module
import lockgate.cli.process as cli_process
from lockgate import interrupts
from lockgate.providers import PROVIDERS

from .helpers import CLI, PROXY_VARIABLES, RETRY_VARIABLES, Outcome


@pytest.fixture
def in_process_main(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """For tests that call `lockgate.cli.main` in this process: main() installs lockgate's
    signal handlers and unraisable hook and makes the process non-dumpable once it read a
    key. Keep this process's own: no dumpability change, no interrupt recorded earlier, and
    the handlers and hook put back afterwards."""
    monkeypatch.setattr(cli_process, "protect_process_memory", lambda: None)
    monkeypatch.setattr(interrupts, "arrived", [])
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    unraisable = sys.unraisablehook
    try:
        yield
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
        sys.unraisablehook = unraisable


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], in_process_main: None
) -> CLI:
    """`lockgate.cli.main(args)` in this process, with a clean environment (no key, no
    proxies, no retry settings) and this process's signal handlers and dumpability kept.
    `key` becomes OPENAI_API_KEY; `env` adds variables."""
    variables = {entry.key_variable for entry in PROVIDERS.values()} | {"OPENAI_API_KEY"}
    variables |= {"OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"}
    for name in (*PROXY_VARIABLES, *RETRY_VARIABLES, *sorted(variables)):
        monkeypatch.delenv(name, raising=False)

    def call(*args: str, key: str | None = None, env: dict[str, str] | None = None) -> Outcome:
        if key is not None:
            monkeypatch.setenv("OPENAI_API_KEY", key)
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        try:
            code = cli_module.main(list(args))
        except SystemExit as exit_:  # argparse: --help, --version, its own usage errors
            code = exit_.code if isinstance(exit_.code, int) else 1
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return call


@pytest.fixture(scope="module")
def startup_marker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `sitecustomize` that touches `$LOCKGATE_TEST_STARTED` when lockgate's entry point
    starts importing `lockgate.cli` (its first guarded step): a signal sent from then on
    reaches lockgate's own code. (Before that, during Python's own start-up — `site`,
    `runpy` — no program can guard against a Ctrl-C.) For `helpers.started_lockgate`."""
    folder = tmp_path_factory.mktemp("startup")
    (folder / "sitecustomize.py").write_text(
        textwrap.dedent(
            """\
            import os
            import sys

            _MARKER = os.environ.get("LOCKGATE_TEST_STARTED")


            class _TouchOnCli:
                @staticmethod
                def find_spec(name, path=None, target=None):
                    if name == "lockgate.cli" and _MARKER:
                        open(_MARKER, "w").close()
                    return None


            if _MARKER:
                sys.meta_path.insert(0, _TouchOnCli)
            """
        )
    )
    return folder
