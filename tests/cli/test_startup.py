"""Start-up stays light: commands that need no provider import no SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("openai", "anthropic", "httpx2", "aiohttp", "httpx")

IMPORTS = textwrap.dedent(
    """
    import json, sys
    from lockgate.cli import main
    try:
        code = main(sys.argv[1:])
    except SystemExit as exit_:
        code = exit_.code
    heavy = sorted(name for name in {heavy!r} if name in sys.modules)
    print(json.dumps({{"code": code, "heavy": heavy}}), file=sys.stderr)
    """
).format(heavy=HEAVY)


@pytest.mark.parametrize(
    "arguments",
    [
        ["--version"],
        ["--help"],
        ["run", "--help"],
        ["run", "--max-turns", "0"],
        ["run"],  # no key
        ["lab", "--transport", "inprocess", "--scenario", "repair"],
    ],
    ids=["version", "help", "run-help", "usage-error", "no-key", "lab-inprocess"],
)
def test_start_up_does_not_import_the_sdks(arguments: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    result = subprocess.run(
        [sys.executable, "-c", IMPORTS, *arguments],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    report = json.loads(result.stderr.splitlines()[-1])
    assert report["code"] in (0, 2), result.stderr
    assert report["heavy"] == []
