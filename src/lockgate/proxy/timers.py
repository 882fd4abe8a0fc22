"""The gating engine's clocks (`engine.GatingStream`): one timer per stream while the engine
awaits the upstream (`_ReadTimer`: the silence limit, the deadline and, while frames are held,
the next keep-alive), and the helpers that run a read in a task of its own and settle it; and
an exchange's one timer on its writes to the client (`_WriteWatchdog`, `respond.Responder`)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

_EXPIRED = "expired"
_KEEPALIVE = "keepalive"


class _ReadTimer:
    """One stream's one timer while the engine awaits the upstream: what falls due first of
    the silence limit (from the start of the read), the deadline and, while frames are
    held, the next keep-alive (`interval` after the last piece sent). Armed once, it is
    re-armed only when it fires before what is due now, or when a keep-alive falls due
    before it (holding began); outside a read it does nothing (the next read re-arms it).
    When what is due falls during a read it cancels the reading task; `read` tells why
    (`_EXPIRED`, `_KEEPALIVE`) and takes the cancellation back, or None when someone else
    cancelled the task too (theirs stands)."""

    __slots__ = (
        "_armed_for",
        "_baseline",
        "_deadline_at",
        "_first_by",
        "_handle",
        "_idle",
        "_interval",
        "_keepalive_at",
        "_loop",
        "_read_from",
        "_reading",
        "_task",
        "_waited",
        "fired",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        idle: float,
        deadline_at: float,
        interval: float,
        first_by: float = math.inf,
    ) -> None:
        self._loop = loop
        self._idle = idle
        self._deadline_at = deadline_at
        self._first_by = first_by  # the first content's limit (loop time), until it came
        self._interval = interval
        self._handle: asyncio.TimerHandle | None = None
        self._armed_for = math.inf
        self._read_from = 0.0
        self._keepalive_at = math.inf
        self._reading = False
        self._task: asyncio.Task[Any] | None = None
        self._baseline = 0
        self._waited = 0.0  # the silence a read had waited through when a keep-alive woke it
        self.fired: str | None = None

    def reading(self, holding: bool, last_sent: float, *, resumed: bool = False) -> None:
        """A read begins now (in the current task), or goes on after a keep-alive
        (`resumed`: the silence it had waited through before the keep-alive still counts,
        the time the consumer spent on the keep-alive does not); while `holding`, a
        keep-alive is due `interval` after `last_sent`."""
        now = self._loop.time()
        self._read_from = now - self._waited if resumed else now
        self._keepalive_at = last_sent + self._interval if holding else math.inf
        task = self._task = asyncio.current_task()
        self._baseline = task.cancelling() if task is not None else 0
        self._reading = True
        due = self._due()
        if self._handle is None or due < self._armed_for:
            if self._handle is not None:
                self._handle.cancel()
            self._armed_for = due
            self._handle = self._loop.call_at(due, self._fire)

    def read(self) -> str | None:
        """The read ended (with bytes, an end, an error or a cancellation): why this timer
        cancelled it (its cancellation taken back, even when the body swallowed it), or None
        when it did not, or someone else cancelled too."""
        self._reading = False
        fired, self.fired = self.fired, None
        if fired is None or self._task is None:
            return None
        return fired if self._task.uncancel() <= self._baseline else None

    def content_came(self) -> None:
        """The first content came: the first-byte limit no longer applies."""
        self._first_by = math.inf

    def _expiry(self) -> float:
        return min(self._read_from + self._idle, self._deadline_at, self._first_by)

    def _due(self) -> float:
        return min(self._expiry(), self._keepalive_at)

    def _fire(self) -> None:
        self._handle = None
        if not self._reading:
            return
        due = self._due()
        if due > self._armed_for:  # a read began, or a piece went out, since it was armed
            self._armed_for = due
            self._handle = self._loop.call_at(due, self._fire)
            return
        self._armed_for = math.inf
        expiry = self._expiry()
        self.fired = _KEEPALIVE if self._keepalive_at < expiry else _EXPIRED
        self._waited = self._loop.time() - self._read_from
        if self._task is not None:
            self._task.cancel()

    def expired_by_deadline(self) -> bool:
        """Whether the deadline, not the silence limit, ended the last read."""
        return self._deadline_at <= min(self._read_from + self._idle, self._first_by)

    def expired_by_first_byte(self) -> bool:
        """Whether the first-byte limit, not the silence limit, ended the last read."""
        return self._first_by < min(self._read_from + self._idle, self._deadline_at)

    def stop(self) -> None:
        self._reading = False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


async def _next(iterator: AsyncIterator[bytes]) -> bytes | None:
    return await anext(iterator, None)


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def _settle(read: asyncio.Future[bytes | None] | None) -> None:
    """Cancel a pending read and wait for it to end (without swallowing our own
    cancellation)."""
    if read is None:
        return
    if not read.done():
        read.cancel()
    try:
        await read
    except asyncio.CancelledError:
        if not read.cancelled() or _being_cancelled():
            raise
    except Exception:
        pass


class _WriteWatchdog:
    """One exchange's one timer on its writes to the client: a write that has waited
    longer than `limit` (the client stopped reading: aiohttp's write waits for the socket
    to drain, with no limit of its own) aborts the client's connection. Armed at the first
    write, re-armed only when it fires before what is due; a write costs a clock read."""

    __slots__ = ("_abort", "_handle", "_limit", "_loop", "_since", "_writing", "fired")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, limit: float, abort: Callable[[], None]
    ) -> None:
        self._loop = loop
        self._limit = limit
        self._abort = abort
        self._handle: asyncio.TimerHandle | None = None
        self._since = 0.0
        self._writing = False
        self.fired = False

    def writing(self) -> None:
        self._since = self._loop.time()
        self._writing = True
        if self._handle is None:
            self._handle = self._loop.call_at(self._since + self._limit, self._fire)

    def written(self) -> None:
        self._writing = False

    def _fire(self) -> None:
        self._handle = None
        if not self._writing:
            return  # the next write arms it again
        due = self._since + self._limit
        if due > self._loop.time():  # a later write began since it was armed
            self._handle = self._loop.call_at(due, self._fire)
            return
        self.fired = True
        self._abort()  # the waiting write returns; `respond.Responder.write` says why

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
