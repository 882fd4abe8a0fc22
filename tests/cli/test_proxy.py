"""`lockgate proxy`: usage errors in one line before anything listens (in this process); the
command as a user runs it (a subprocess in front of the scripted server): its first line,
one line per request, the held key and the client token never printed, SIGTERM letting a
stream in flight end before exit 0, the gate's bounds and the allowed host names as flags,
and at the file-descriptor limit one line, then accepting again."""

from __future__ import annotations

import http.client
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

import pytest

from lockgate.proxy.loop_policy import loop_name
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import Faults, Turn

from ..helpers import CLI, EDIT, ServerThread, finish, usage_error_line, wait_until
from ..proxy.support import ends_with_refusal, request_for, tool_events, turn_bytes

HELD_KEY = "sk-held-CLI-SECRET-a1b2c3d4e5f6"
TOKEN = "lockgate-cli-TOKEN-0987654321"
PATH = "/v1/chat/completions"
ACCEPTED = Turn(reply=Reply("r1", (Say("Fixing."), Call("call_1", "edit", EDIT))))
INVALID = Turn(reply=Reply("r2", (Call("call_1", "edit", EDIT), Call("call_2", "rm_rf", {"x": 1}))))
SLOW = Turn(reply=ACCEPTED.reply, faults=Faults(stall_after=1, stall_seconds=1.0))
LISTENING = re.compile(r"proxying at (http://127\.0\.0\.1:\d+) -> (\S+)(?: \(event loop: \w+\))?")
LINE = re.compile(r"(\S+) (\S+) (\S+) (.+) (\d{3}) (\d+) ms")


# --- usage errors ---------------------------------------------------------------------------


BAD = {
    ("proxy",): (
        "lockgate proxy: error: one of the arguments --upstream --config is required "
        "(see lockgate proxy --help)"
    ),
    ("proxy", "--upstream", "https://api.example/v1?key=1"): (
        "lockgate proxy: error: argument --upstream: the upstream URL must not carry a query "
        "or a fragment (see lockgate proxy --help)"
    ),
    ("proxy", "--upstream", "https://user:pw@api.example"): (
        "lockgate proxy: error: argument --upstream: the URL must not carry user:password "
        "(the key comes from the environment) (see lockgate proxy --help)"
    ),
    ("proxy", "--upstream", "ftp://api.example"): (
        "lockgate proxy: error: argument --upstream: 'ftp://api.example' is not an http(s) URL "
        "with a host (see lockgate proxy --help)"
    ),
    ("proxy", "--upstream", "https://api.example", "--host", "0.0.0.0"): (
        "lockgate: --host 0.0.0.0 is not a loopback address: give --allow-remote to listen there"
    ),
    (
        "proxy",
        *("--upstream", "https://api.example", "--host", "0.0.0.0", "--allow-remote"),
        *("--api-key-env", "LG_PROXY_KEY"),
    ): (
        "lockgate: a proxy that holds a key (--api-key-env) and listens beyond loopback needs "
        "--client-token-env"
    ),
    ("proxy", "--upstream", "https://api.example", "--api-key-env", "PATH"): (
        "lockgate proxy: error: argument --api-key-env: PATH is a system variable, not an API "
        "key: its value would be sent as the credential (see lockgate proxy --help)"
    ),
    ("proxy", "--upstream", "https://api.example", "--api-key-env", "LG_PROXY_UNSET"): (
        "lockgate: LG_PROXY_UNSET is not set; the proxy did not start"
    ),
    ("proxy", "--upstream", "https://api.example", "--api-key-env", "LG_PROXY_SHORT"): (
        "lockgate: LG_PROXY_SHORT: the API key is too short to be kept out of output "
        "(under 4 chars); the proxy did not start"
    ),
    (
        "proxy",
        *("--upstream", "https://api.example", "--api-key-env", "LG_PROXY_KEY"),
        *("--client-token-env", "LG_PROXY_KEY"),
    ): "lockgate: --client-token-env must name another variable than --api-key-env",
    ("proxy", "--upstream", "https://api.example", "--max-streams", "0"): (
        "lockgate proxy: error: argument --max-streams: must be between 1 and 1000000 "
        "(see lockgate proxy --help)"
    ),
    ("proxy", "--upstream", "https://api.example", "--hold", "never"): (
        "lockgate proxy: error: argument --hold: invalid choice: 'never' (choose from 'tools', "
        "'terminal', 'all') (see lockgate proxy --help)"
    ),
    ("proxy", "--upstream", "https://api.example", "--first-byte-timeout", "0"): (
        "lockgate proxy: error: argument --first-byte-timeout: must be a positive number of "
        "seconds (see lockgate proxy --help)"
    ),
    ("proxy", "--upstream", "https://api.example", "--websocket", "bogus"): (
        "lockgate proxy: error: argument --websocket: invalid choice: 'bogus' (choose from "
        "'relay', 'refuse') (see lockgate proxy --help)"
    ),
    ("proxy", "--upstream", "https://api.example", "--idle-timeout", "0"): (
        "lockgate proxy: error: argument --idle-timeout: must be a positive number of seconds "
        "(see lockgate proxy --help)"
    ),
    ("proxy", "--upstream", "https://api.example", "--max-calls", "0"): (
        "lockgate proxy: error: argument --max-calls: must be between 1 and 1000000000 "
        "(see lockgate proxy --help)"
    ),
    ("proxy", "--upstream", "https://api.example", "--max-argument-chars", "lots"): (
        "lockgate proxy: error: argument --max-argument-chars: 'lots' is not a whole number "
        "(see lockgate proxy --help)"
    ),
    ("proxy", "--upstream", "https://api.example", "--max-text-chars", "1e9"): (
        "lockgate proxy: error: argument --max-text-chars: '1e9' is not a whole number "
        "(see lockgate proxy --help)"
    ),
    ("proxy", "--upstream", "https://api.example", "--head-timeout", "0"): (
        "lockgate proxy: error: argument --head-timeout: must be a positive number of seconds "
        "(see lockgate proxy --help)"
    ),
    ("proxy", "--upstream", "https://api.example", "--allow-host", "gate.example"): (
        "lockgate: --allow-host only matters for a proxy that holds a key (--api-key-env)"
    ),
    ("proxy", "--upstream", "https://api.example", "--key-on-any-path", "--allow-host", "g"): (
        "lockgate: --allow-host and --key-on-any-path only matter for a proxy that holds a key "
        "(--api-key-env)"
    ),
    (
        "proxy",
        *("--upstream", "https://api.example", "--api-key-env", "LG_PROXY_KEY"),
        *("--allow-host", "gate.example/x"),
    ): (
        "lockgate: --allow-host: 'gate.example/x' is not a host name (letters, digits, '-' and "
        "'_' between dots)"
    ),
}


@pytest.mark.parametrize("args", list(BAD), ids=[" ".join(a[1:]) or "none" for a in BAD])
def test_bad_flags_exit_two_in_one_line(cli: CLI, args: tuple[str, ...]) -> None:
    result = cli(*args, env={"LG_PROXY_KEY": HELD_KEY, "LG_PROXY_SHORT": "ab"})
    assert usage_error_line(result) == BAD[args]
    assert HELD_KEY not in result.output


def test_a_port_in_use_is_one_line_exit_two(cli: CLI) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli("proxy", "--upstream", "http://127.0.0.1:9", "--port", str(port))
    line = usage_error_line(result)
    assert line.startswith(f"lockgate: cannot listen on 127.0.0.1:{port}: "), line


def test_the_parsers_defaults_are_the_proxys_own() -> None:
    from lockgate.cli.args import (
        HEAD_TIMEOUT_SECONDS,
        PROXY_KEEPALIVE_SECONDS,
        PROXY_MAX_HELD_BYTES,
        PROXY_MAX_STREAMS,
    )
    from lockgate.proxy.engine import DEFAULT_KEEPALIVE_SECONDS
    from lockgate.proxy.server import (
        DEFAULT_HEAD_TIMEOUT,
        DEFAULT_MAX_HELD_BYTES,
        DEFAULT_MAX_STREAMS,
    )

    assert (
        PROXY_KEEPALIVE_SECONDS,
        PROXY_MAX_STREAMS,
        HEAD_TIMEOUT_SECONDS,
        PROXY_MAX_HELD_BYTES,
    ) == (
        DEFAULT_KEEPALIVE_SECONDS,
        DEFAULT_MAX_STREAMS,
        DEFAULT_HEAD_TIMEOUT,
        DEFAULT_MAX_HELD_BYTES,
    )


def test_a_usage_error_imports_no_http_library() -> None:
    script = textwrap.dedent(
        """
        import json, sys
        from lockgate.cli import main
        code = main(sys.argv[1:])
        heavy = sorted(n for n in ("aiohttp", "openai", "anthropic", "httpx") if n in sys.modules)
        print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, "proxy", "--upstream", "https://a.b", "--host", "::"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert json.loads(result.stderr.splitlines()[-1]) == {"code": 2, "heavy": []}


# --- the command as a user runs it -----------------------------------------------------------


@contextmanager
def running_proxy(
    upstream: str,
    *args: str,
    env: dict[str, str] | None = None,
    stderr: IO[str] | int = subprocess.PIPE,
    preexec_fn: Callable[[], None] | None = None,
) -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    """`lockgate proxy --upstream UPSTREAM ARGS`: the process, its URL and its first line."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("LG_")}
    environment.update(env or {})
    process = subprocess.Popen(
        [sys.executable, "-m", "lockgate", "proxy", "--upstream", upstream, *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
        text=True,
        env=environment,
        preexec_fn=preexec_fn,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        if args and "--json" in args:
            url = json.loads(first)["url"]
        else:
            match = LISTENING.fullmatch(first.rstrip("\n"))
            assert match is not None, (first, process.stderr.read() if process.stderr else "")
            url = match[1]
        yield process, url, first
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def connection(url: str) -> http.client.HTTPConnection:
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)


def request_with(url: str, headers: dict[str, str], method: str = "POST") -> tuple[int, bytes]:
    conn = connection(url)
    try:
        body = json.dumps(request_for("chat")) if method == "POST" else None
        conn.request(method, PATH if method == "POST" else "/v1/models", body, headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_the_proxy_gates_holds_the_key_and_stops_after_the_stream_in_flight() -> None:
    env = {"LG_KEY": HELD_KEY, "LG_TOKEN": TOKEN}
    flags = ("--api-key-env", "LG_KEY", "--client-token-env", "LG_TOKEN", "--idle-timeout", "20")
    with (
        ServerThread([ACCEPTED, INVALID, SLOW], provider="chat") as server,
        running_proxy(server.base_url.removesuffix("/v1"), *flags, env=env) as (proc, url, first),
    ):
        auth = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
        accepted = request_with(url, auth)
        refused = request_with(url, auth)
        unauthorized = request_with(url, {"authorization": "Bearer sk-not-the-token"})

        conn = connection(url)
        conn.request("POST", PATH, json.dumps(request_for("chat")), auth)
        response = conn.getresponse()
        start = response.read1(65536)  # the stream is in flight (stalled upstream)
        assert start
        proc.send_signal(signal.SIGTERM)
        rest = response.read()
        conn.close()
        code, out, err = finish(proc)
    assert code == 0, err
    upstream = server.base_url.removesuffix("/v1")
    assert first.rstrip("\n") == f"proxying at {url} -> {upstream} (event loop: {loop_name()})"
    assert accepted == (200, turn_bytes(ACCEPTED, "chat"))
    assert refused[0] == 200
    assert ends_with_refusal(refused[1], "chat")
    assert tool_events(refused[1]) == []
    assert unauthorized[0] == 401
    assert start + rest == turn_bytes(SLOW, "chat")
    lines = out.splitlines()
    parsed = [LINE.fullmatch(line) for line in lines]
    assert all(parsed), lines
    summary = [(m[1], m[2], m[3], m[4].split(":")[0], m[5]) for m in parsed if m]
    # The first three in any order (each is logged as its handler ends), the stream last.
    assert sorted(summary[:3]) == [
        ("POST", PATH, "chat", "passed", "200"),
        ("POST", PATH, "chat", "rejected", "401"),
        ("POST", PATH, "chat", "withheld 2 calls", "200"),
    ]
    assert summary[3] == ("POST", PATH, "chat", "passed", "200")
    assert any("withheld 2 calls: invalid_batch: " in line for line in lines)
    assert err.splitlines() == ["lockgate proxy: stopped after 4 requests"]
    for text in (first, out, err):
        assert HELD_KEY not in text
        assert TOKEN not in text
    assert server.server is not None
    seen = server.server.requests
    assert len(seen) == 3
    assert all(r.headers["authorization"] == "Bearer [redacted]" for r in seen)
    assert all("x-lockgate-token" not in r.headers for r in seen)


def test_json_lines_and_sigint() -> None:
    with (
        ServerThread([ACCEPTED], provider="chat") as server,
        running_proxy(server.base_url.removesuffix("/v1"), "--json", "--hold", "terminal") as (
            proc,
            url,
            first,
        ),
    ):
        assert request_with(url, {"content-type": "application/json"}) == (
            200,
            turn_bytes(ACCEPTED, "chat"),
        )
        conn = connection(url)
        conn.request("GET", "/v1/models")
        assert conn.getresponse().status == 404  # the scripted server's answer, passed back
        conn.close()
        assert proc.stdout is not None
        request_lines = [proc.stdout.readline(), proc.stdout.readline()]
        proc.send_signal(signal.SIGINT)
        code, out, err = finish(proc)
    assert code == 0, err
    assert json.loads(first) == {
        "event": "listening",
        "url": url,
        "upstream": server.base_url.removesuffix("/v1"),
        "loop": loop_name(),
    }
    records = [json.loads(line) for line in request_lines + out.splitlines()]
    assert [
        (r["event"], r["method"], r["path"], r["protocol"], r["outcome"], r["status"])
        for r in records
    ] == [
        ("request", "POST", PATH, "chat", "passed", 200),
        ("request", "GET", "/v1/models", None, "forwarded", 404),
    ]
    assert all(isinstance(r["duration_ms"], float) for r in records)
    assert err.splitlines() == ["lockgate proxy: stopped after 2 requests"]


# --- the gate's bounds and the allowed host names -------------------------------------------

TWO_CALLS = Turn(reply=Reply("r3", (Call("call_1", "edit", EDIT), Call("call_2", "edit", EDIT))))


def test_the_gates_bounds_and_the_allowed_hosts_are_flags() -> None:
    env = {"LG_KEY": HELD_KEY}
    flags = ("--api-key-env", "LG_KEY", "--max-calls", "1", "--allow-host", "gate.internal")
    with (
        ServerThread([TWO_CALLS], provider="chat") as server,
        running_proxy(server.base_url.removesuffix("/v1"), *flags, env=env) as (proc, url, _),
    ):
        json_type = {"content-type": "application/json"}
        refused = request_with(url, {**json_type, "host": "gate.internal:8787"})
        rebound = request_with(url, {**json_type, "host": "rebind.example:8787"})
        files = request_with(url, {}, "GET")
        proc.send_signal(signal.SIGTERM)
        code, out, err = finish(proc)
    assert code == 0, err
    assert refused[0] == 200
    assert ends_with_refusal(refused[1], "chat")
    assert b"bound_exceeded" in refused[1]
    assert tool_events(refused[1]) == []
    assert rebound[0] == 403
    assert files[0] == 404  # GET /v1/models takes the key: the scripted server's answer
    lines = out.splitlines()
    assert "withheld 2 calls: bound_exceeded: " in lines[0]
    assert " rejected: the Host 'rebind.example:8787' is not this proxy's" in lines[1]
    assert HELD_KEY not in out + err


# --- at the file-descriptor limit ------------------------------------------------------------


def test_at_the_descriptor_limit_one_line_then_accepting_again(tmp_path: Path) -> None:
    """With 32 descriptors the proxy runs out after about 20 connections: new ones wait in
    the listening backlog. It says so in one line (no traceback, however many tries), and
    accepts again once connections close."""

    def low_limit() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (32, hard))

    # asyncio's loop: on uvloop's, libuv handles EMFILE itself and no line is said
    # (`lockgate.proxy.loop_policy`).
    errors = tmp_path / "stderr"
    asyncio_loop = {"LOCKGATE_PROXY_LOOP": "asyncio"}
    with (
        ServerThread([], provider="chat") as server,
        errors.open("w") as stderr,
        running_proxy(
            server.base_url.removesuffix("/v1"),
            stderr=stderr,
            preexec_fn=low_limit,
            env=asyncio_loop,
        ) as (process, url, _),
    ):
        address = urllib.parse.urlsplit(url)
        assert address.hostname is not None
        assert address.port is not None

        def alive() -> bool:
            return process.poll() is None

        def said(words: str) -> bool:
            return any(words in line for line in errors.read_text().splitlines())

        with ExitStack() as clients:
            for _ in range(40):
                clients.enter_context(
                    socket.create_connection((address.hostname, address.port), timeout=30)
                )
            wait_until(lambda: said("cannot accept new connections"), "the line", alive=alive)
        wait_until(lambda: said("accepting connections again"), "accepting", alive=alive)
        status = request_with(url, {}, "GET")[0]
        process.send_signal(signal.SIGINT)
        code, _, _ = finish(process)
    lines = errors.read_text().splitlines()
    assert code == 0
    assert status == 404  # served again: the scripted server's answer, passed back
    assert "Traceback" not in errors.read_text()
    blocked = [line for line in lines if "cannot accept new connections" in line]
    assert blocked[0] == (
        "lockgate proxy: cannot accept new connections: Too many open files (EMFILE); they "
        "wait and are accepted as descriptors free up"
    )
    assert len(blocked) <= 3  # one line at most every 10 s, not one per try
    assert lines[-1] == "lockgate proxy: stopped after 1 request"
    assert set(lines) <= {*blocked, "lockgate proxy: accepting connections again", lines[-1]}
