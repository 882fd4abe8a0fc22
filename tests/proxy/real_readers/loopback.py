"""Loopback only: a guard that refuses, and counts, any connection or lookup beyond loopback."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

# --- loopback only --------------------------------------------------------------------------


_LOOPBACK = ("127.0.0.1", "::1", "localhost")
# Every connection or lookup `loopback_only` refused (none is expected: a library that tries
# one is reported by the differential).
REFUSED: list[str] = []


@contextlib.contextmanager
def loopback_only() -> Iterator[None]:
    """Within the block, a connection anywhere but loopback raises (a guard: nothing here
    may reach the network, litellm included)."""
    original = socket.socket.connect
    original_ex = socket.socket.connect_ex
    original_getaddrinfo = socket.getaddrinfo

    def check(address: object) -> None:
        if isinstance(address, tuple) and address and address[0] not in _LOOPBACK:
            REFUSED.append(f"a connection to {address[0]!r}")
            raise OSError(f"loopback only: a connection to {address[0]!r} refused")

    def connect(self: socket.socket, address: Any) -> None:
        check(address)
        original(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(address)
        return original_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, bytes):
            host = host.decode()
        if host is not None and host not in _LOOPBACK:
            REFUSED.append(f"a lookup of {host!r}")
            raise OSError(f"loopback only: no lookup of {host!r}")
        return original_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = getaddrinfo
    try:
        yield
    finally:
        socket.socket.connect = original  # type: ignore[method-assign]
        socket.socket.connect_ex = original_ex  # type: ignore[method-assign]
        socket.getaddrinfo = original_getaddrinfo
