"""The public surface: `lockgate.__all__` resolves, and importing lockgate loads no SDK."""

from __future__ import annotations

import subprocess
import sys

import lockgate


def test_every_public_name_resolves() -> None:
    for name in lockgate.__all__:
        assert getattr(lockgate, name) is not None, name
    assert set(lockgate.__all__) - {"__version__"} == set(lockgate._EXPORTS)


def test_importing_the_package_loads_no_sdk() -> None:
    code = (
        "import sys, lockgate; lockgate.PROVIDERS; "
        "print(sorted(m for m in ('openai', 'anthropic', 'aiohttp', 'httpx2', 'botocore') "
        "if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
