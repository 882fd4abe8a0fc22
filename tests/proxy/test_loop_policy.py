"""The proxy's event loop: uvloop's where it can be imported (not on Windows), asyncio's
otherwise, and its name in the proxy's first line."""

from __future__ import annotations

import asyncio
import json
import sys
from types import SimpleNamespace

import pytest

from lockgate.cli.output import listening_output
from lockgate.proxy import loop_policy
from lockgate.proxy.config import ProxyConfig


async def _name() -> str:
    return loop_policy.running_loop_name()


def test_uvloop_is_picked_where_it_imports() -> None:
    pytest.importorskip("uvloop")
    if sys.platform == "win32":
        pytest.skip("uvloop does not exist on Windows")
    assert loop_policy.loop_name() == "uvloop"
    assert loop_policy.run(_name()) == "uvloop"
    assert loop_policy.gunicorn_worker_class() == "aiohttp.GunicornUVLoopWebWorker"


def test_asyncio_is_picked_where_uvloop_does_not_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    assert loop_policy.loop_name() == "asyncio"
    assert loop_policy.run(_name()) == "asyncio"
    assert loop_policy.gunicorn_worker_class() == "aiohttp.GunicornWebWorker"


def test_asyncio_on_windows_even_with_uvloop_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        sys.modules, "uvloop", SimpleNamespace(new_event_loop=asyncio.new_event_loop)
    )
    monkeypatch.setattr(sys, "platform", "win32")
    assert loop_policy.loop_name() == "asyncio"


def test_asyncio_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKGATE_PROXY_LOOP", "asyncio")
    assert loop_policy.loop_name() == "asyncio"
    assert loop_policy.run(_name()) == "asyncio"


def test_the_first_line_names_the_loop() -> None:
    settings = ProxyConfig(upstream="http://127.0.0.1:9").settings()
    text = listening_output("http://127.0.0.1:8787", settings, False, loop="uvloop")
    assert text == "proxying at http://127.0.0.1:8787 -> http://127.0.0.1:9 (event loop: uvloop)"
    workers = listening_output("http://127.0.0.1:8787", settings, False, 2, "asyncio")
    assert workers.endswith("(2 workers, event loop: asyncio)")
    record = json.loads(listening_output("http://127.0.0.1:8787", settings, True, loop="uvloop"))
    assert record["loop"] == "uvloop"


@pytest.mark.parametrize("asked", ["bogus", "UVLOOP-ish"])
def test_an_unknown_loop_asked_for_is_one_line(asked: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKGATE_PROXY_LOOP", asked)
    problem = loop_policy.loop_problem()
    assert problem is not None
    assert "must be asyncio or uvloop" in problem


def test_the_proxy_refuses_a_loop_it_cannot_run_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lockgate.cli import main

    monkeypatch.setenv("LOCKGATE_PROXY_LOOP", "bogus")
    code = main(["proxy", "--upstream", "http://127.0.0.1:9", "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "LOCKGATE_PROXY_LOOP must be asyncio or uvloop" in err
