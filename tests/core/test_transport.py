"""The shared HTTP transport (`transport.py`, `http.py`, `sdk.py`): bounded, never redirected."""

from __future__ import annotations

import asyncio
import math
import socket
import struct
from typing import Any

import pytest
from benchmarks.hostile import (
    GIB,
    RSS_LIMIT_MIB,
    RawRequest,
    RawServer,
    error_body,
    gzip_bomb,
    gzip_bomb_body,
    header_flood,
    raw_server,
    run_cli,
)

from lockgate.errors import FailureKind
from lockgate.fixture import CALCULATOR
from lockgate.lab.server import ServerThread
from lockgate.providers import PROVIDERS
from lockgate.scripted.script import Turn
from lockgate.transport import TransportOptions

from ..helpers import CLI, KEY, closing, failed_as, requests_of, retry_lines, serve, text_turn

# --- error bodies are bounded -------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [error_body(500, GIB), gzip_bomb_body(500, GIB)],
    ids=["1-GiB-body", "gzip-bomb-1MB-to-1GiB"],
)
def test_error_bodies_are_read_under_a_cap(make: Any) -> None:
    with raw_server(make) as server:
        result = run_cli(server.base_url, "--retry-base-delay", "0.05", timeout=60)
    print(f"peak RSS {result.peak_rss_mib:.1f} MiB, server wrote {server.sent >> 20} MiB")
    assert result.peak_rss_mib < RSS_LIMIT_MIB
    assert len(server.requests) == 3  # a 5xx: retried, 3 attempts
    assert [(r.attempt, r.max_attempts) for r in retry_lines(result.stderr)] == [(2, 3), (3, 3)]
    assert result.exit_code == 1, result.stderr
    ending = closing(result.stdout)
    assert ending.stopped == "provider_failure (opening: HTTP 500)"  # no body quoted
    assert (ending.executed_tools, ending.source) == (0, CALCULATOR)
    assert "Traceback" not in result.stderr
    assert server.sent < 3 * GIB // 4  # the client stopped reading early


def test_the_peak_measured_is_the_child_s_own() -> None:
    """A child forked from a big process inherits that process's high-water RSS in its
    `ru_maxrss`: the measurement must not (this test process holds 256 MiB more)."""
    ballast = b"\x01" * (256 << 20)  # written, so resident
    with serve([text_turn()]) as server:
        result = run_cli(server.base_url, timeout=60)
    del ballast
    assert result.exit_code == 0, result.stderr
    assert result.peak_rss_mib < 150


def test_gzip_bomb_is_what_it_claims() -> None:
    import zlib

    bomb = gzip_bomb(GIB)
    assert len(bomb) < 1_200_000
    inflater = zlib.decompressobj(31)
    inflated = sum(
        len(inflater.decompress(bomb[i : i + 65536], 1 << 24)) for i in range(0, 4 << 16, 65536)
    )
    assert inflated >= 64 << 20  # a quarter MiB of it already inflates to 64+ MiB


@pytest.mark.parametrize("one_line", [False, True], ids=["many-header-lines", "one-huge-line"])
def test_a_header_flood_is_an_opening_failure_not_an_internal_error(
    cli: CLI, one_line: bool
) -> None:
    with raw_server(header_flood(100 << 20, one_line=one_line)) as server:
        result = cli(
            "run",
            "--base-url",
            server.base_url,
            "--retry-attempts",
            "2",
            "--retry-base-delay",
            "0.01",
            key=KEY,
        )
    failed_as(result, FailureKind.OPENING)
    assert len(server.requests) == 2  # retried like a connection error
    assert server.sent < 20 << 20


def cut_error_body(status: int) -> Any:
    """HTTP `status` announcing a 100 kB JSON error, then a reset after 1 kB of it."""

    def make(server: RawServer) -> Any:
        async def handle(
            request: RawRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            writer.write(
                f"HTTP/1.1 {status} Error\r\ncontent-type: application/json\r\n"
                "content-length: 100000\r\n\r\n".encode()
                + b'{"error": {"code": "invalid_api_key", "message": "'
                + b"x" * 1000
            )
            await writer.drain()
            await asyncio.sleep(0.05)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()

        return handle

    return make


@pytest.mark.parametrize(("status", "requests"), [(401, 1), (503, 3)])
def test_an_error_body_that_breaks_off_keeps_its_status(
    cli: CLI, status: int, requests: int
) -> None:
    with raw_server(cut_error_body(status)) as server:
        result = cli("run", "--base-url", server.base_url, "--retry-base-delay", "0.01", key=KEY)
    ending = failed_as(result, FailureKind.OPENING)
    assert ending.stopped == f"provider_failure (opening: HTTP {status})"
    assert len(server.requests) == requests  # a 401 is terminal, not a connection error


@pytest.mark.parametrize("name", list(PROVIDERS))
def test_every_provider_s_transport_bounds_hostile_openings(cli: CLI, name: str) -> None:
    """The HTTP client is shared: a header flood and a broken-off 401 body fail as
    openings for every registered protocol (the key read from its own variable)."""
    variable = PROVIDERS[name].key_variable
    for make, requests in ((header_flood(100 << 20, one_line=True), 2), (cut_error_body(401), 1)):
        with raw_server(make) as server:
            result = cli(
                "run",
                "--provider",
                name,
                "--base-url",
                server.base_url.removesuffix("/v1"),
                "--retry-attempts",
                "2",
                "--retry-base-delay",
                "0.01",
                env={variable: KEY},
            )
        failed_as(result, FailureKind.OPENING)
        assert len(server.requests) == requests, (name, result.out)


# --- redirects and encodings -------------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_followed(cli: CLI, status: int) -> None:
    with serve([text_turn()]) as elsewhere:
        target = f"{elsewhere.base_url}/responses"
        with serve([Turn(status=status, headers={"location": target})]) as server:
            result = cli("run", "--base-url", server.base_url, key=KEY)
            assert len(requests_of(server)) == 1
        assert requests_of(elsewhere) == []
    ending = failed_as(result, FailureKind.OPENING)
    assert ending.stopped == f"provider_failure (opening: HTTP {status})"


def test_streams_are_requested_uncompressed(cli: CLI) -> None:
    with ServerThread([text_turn()]) as running:
        result = cli("run", "--base-url", running.base_url, key=KEY)
        assert running.server is not None
        encodings = [r.headers.get("accept-encoding") for r in running.server.requests]
    assert result.code == 0, result.err
    assert encodings == ["identity"]


# --- options -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"timeout": math.nan},
        {"timeout": math.inf},
        {"timeout": 0},
        {"read_timeout": math.nan},
        {"read_timeout": -1.0},
        {"timeout": True},
    ],
)
def test_transport_options_refuse_bad_timeouts(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="timeout"):
        TransportOptions(api_key=KEY, **options)


def test_every_bounded_client_shares_one_certificate_context() -> None:
    # Loading the system's CA certificates costs about 20 ms of CPU: once per process (and
    # per setting), never per client; a changed SSL_CERT_FILE gets its own context.
    import httpx2

    from lockgate.http import bounded_client, shared_ssl_context

    first = bounded_client(httpx2.AsyncClient, timeout=5, read_timeout=None, trust_env=False)
    second = bounded_client(httpx2.AsyncClient, timeout=5, read_timeout=None, trust_env=False)
    assert shared_ssl_context(False) is shared_ssl_context(False)
    for client in (first, second):
        pool = client._transport._pool  # type: ignore[attr-defined]
        assert pool._ssl_context is shared_ssl_context(False)


def test_a_cut_body_is_described_without_a_status_the_server_never_sent() -> None:
    import aiohttp
    from aiohttp.http_exceptions import TransferEncodingError

    from lockgate.http import describe

    inner = TransferEncodingError("Not enough data to satisfy transfer length header.")
    cut = aiohttp.ClientPayloadError(f"Response payload is not completed: {inner!r}")
    assert "400" in str(cut)  # aiohttp's own text quotes a status the server never sent
    assert describe(cut) == (
        "ClientPayloadError: Response payload is not completed: TransferEncodingError: "
        "Not enough data to satisfy transfer length header."
    )
    assert describe(ConnectionResetError("reset by peer\nmore")) == (
        "ConnectionResetError: reset by peer"
    )
