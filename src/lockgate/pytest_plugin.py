"""The pytest plugin (entry point `pytest11`: on whenever lockgate is installed): the
`lockgate_cassette` fixture serves recorded exchanges, with faults overlaid, on loopback.

    def test_refuses_a_cut_stream(lockgate_cassette):
        server = lockgate_cassette("tests/cassettes/edit.cassette.jsonl", faults=["cut:inside=3"])
        client = openai.OpenAI(base_url=server.base_url, api_key="test")
        ...
        assert len(server.requests) == 1

The server runs on its own event loop in a background thread (sync and async tests alike use
it) and is stopped when the test ends. A relative path is taken from pytest's root folder.
This module imports nothing heavy: pytest loads it in every project that has lockgate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pytest

if TYPE_CHECKING:
    from .cassette.faults import Fault
    from .cassette.serving import Exchange
    from .lab.recorded import RecordedRequest
    from .lab.server import ServerThread

__all__ = ["CassetteServer", "lockgate_cassette"]


class CassetteServer:
    """A running cassette server: `base_url` (as the protocol's SDK takes it), `requests`
    (what it received), `exchanges` (each served exchange and the faults it got)."""

    def __init__(self, thread: ServerThread, served: Sequence[Exchange], provider: str) -> None:
        self._thread = thread
        self.exchanges = tuple(served)
        self.provider = provider

    @property
    def base_url(self) -> str:
        return self._thread.base_url

    @property
    def requests(self) -> list[RecordedRequest]:
        server = self._thread.server
        return [] if server is None else server.requests

    def stop(self) -> None:
        """Stop the server (waiting for open connections); the fixture does it at teardown."""
        self._thread.__exit__(None, None, None)


CassetteFactory = Callable[..., CassetteServer]


def _start(
    root: Path,
    path: str | Path,
    faults: Sequence[str | Fault],
    timing: Literal["recorded", "fast"],
    match: Literal["order", "request"],
) -> CassetteServer:
    from .cassette.format import CassetteError, load_all
    from .cassette.serving import RequestMatcher, exchanges, protocol_of
    from .lab.server import ServerThread

    target = Path(path)
    if not target.is_absolute():
        target = root / target
    try:
        cassettes = load_all(target)
        provider = protocol_of(cassettes)
        served = exchanges(cassettes, faults, timing=timing)
    except (CassetteError, ValueError) as exc:
        pytest.fail(f"lockgate_cassette: {exc}", pytrace=False)
    if match not in ("order", "request"):
        pytest.fail("lockgate_cassette: match must be 'order' or 'request'", pytrace=False)
    select = RequestMatcher(served) if match == "request" else None
    thread = ServerThread([exchange.turn for exchange in served], provider=provider, select=select)
    thread.__enter__()
    return CassetteServer(thread, served, provider)


@pytest.fixture
def lockgate_cassette(request: pytest.FixtureRequest) -> Iterator[CassetteFactory]:
    """A factory: `lockgate_cassette(PATH, faults=[...], timing="fast", match="order")`
    serves the cassette (or folder of cassettes) at PATH and returns a `CassetteServer`;
    every server it started is stopped when the test ends."""
    started: list[CassetteServer] = []
    root = Path(request.config.rootpath)

    def start(
        path: str | Path,
        faults: Sequence[str | Fault] = (),
        *,
        timing: Literal["recorded", "fast"] = "fast",
        match: Literal["order", "request"] = "order",
    ) -> CassetteServer:
        server = _start(root, path, faults, timing, match)
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()
