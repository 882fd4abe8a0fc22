"""The pytest plugin (`pytest11` entry point `lockgate`): the `lockgate_cassette` fixture in
a project of its own (pytester): the openai SDK against a recorded chat exchange passes; the
same exchange cut inside an event is refused by lockgate's gate; a bad cassette fails the test
in one line; importing the plugin imports no SDK."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lockgate.cassette.format import save

from .recorded import recorded

# In a subprocess, not in-process: pytester restores `sys.modules` after an in-process run,
# and a module first imported inside it (httpcore2, which httpx2 imports lazily) would come
# back later as new classes that httpx2's cached exception map no longer knows.
pytest_plugins = ["pytester"]

EXAMPLE = """
import asyncio

import openai
import pytest

from lockgate import gated_client

CASSETTE = "tests/cassettes/edit.cassette.jsonl"
REQUEST = {"model": "lab-model", "messages": [{"role": "user", "content": "fix it"}]}


def test_the_recorded_call_arrives(lockgate_cassette):
    server = lockgate_cassette(CASSETTE)
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    stream = client.chat.completions.create(**REQUEST, stream=True)
    names = [
        call.function.name
        for chunk in stream
        for choice in chunk.choices
        for call in choice.delta.tool_calls or []
        if call.function and call.function.name
    ]
    assert names == ["edit"]
    assert len(server.requests) == 1


def test_lockgate_refuses_the_cut_stream(lockgate_cassette):
    server = lockgate_cassette(CASSETTE, faults=["cut:inside=7"])

    async def main():
        client = openai.AsyncOpenAI(
            base_url=server.base_url, api_key="test", max_retries=0, http_client=gated_client()
        )
        async with client.chat.completions.stream(**REQUEST) as stream:
            async for _ in stream:
                pass

    with pytest.raises(openai.APIError, match="lockgate withheld 1 tool call"):
        asyncio.run(main())
    assert [str(f) for e in server.exchanges for f in e.faults] == ["cut:inside=7"]
"""


def test_the_fixture_serves_a_cassette_to_the_sdk_and_the_gate(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    (pytester.path / "tests" / "cassettes").mkdir(parents=True)
    save(recorded("chat"), pytester.path / "tests" / "cassettes" / "edit.cassette.jsonl")
    pytester.makepyfile(test_example=EXAMPLE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2)


def test_a_bad_cassette_fails_the_test_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    (pytester.path / "broken.cassette.jsonl").write_text("not json\n")
    pytester.makepyfile(
        test_bad="def test_it(lockgate_cassette):\n    lockgate_cassette('broken.cassette.jsonl')\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*lockgate_cassette: *broken.cassette.jsonl:1: not a JSON line"])
    assert "Traceback" not in result.stdout.str()


def test_the_plugin_is_registered_and_cheap_to_import() -> None:
    code = (
        "import sys, importlib.metadata as m\n"
        "names = [e.value for e in m.entry_points(group='pytest11') if e.name == 'lockgate']\n"
        "assert names == ['lockgate.pytest_plugin'], names\n"
        "import lockgate.pytest_plugin\n"
        "heavy = {'openai', 'anthropic', 'httpx', 'httpx2', 'google.genai', 'lockgate.providers'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "[]"
