"""Which upstream a request's next attempt goes to, and after what wait: the route's failover
plan (`FailoverPlan`), pure and clock-free, read by the attempt stage (`attempt.py`), which
owns whether a failure may be retried at all (nothing of it seen, the route's deadline).

- **Same upstream first.** A one-off failure (a 429, a 5xx, a reset, a cut, a malformed or
  transient in-stream error; with `hold: all`, any refusal but the provider's own) is tried
  again on the upstream that failed, up to its retries (`retries` of a fall-back, else the
  route's `retries.attempts`), after the retry owner's back-off or the `retry-after` it
  sent, whichever is longer. Then the next upstream, at once.
- **Silence moves on.** No answer, no first content or silence within the limits: the next
  upstream at once (the same one only when there is no other).
- **A wait too long** (a `retry-after` beyond `max_wait`): the next upstream at once, never
  the one that asked for it.
- **A context window exceeded** (a 400 that says so): the route's `context_fallbacks` in
  turn, never the same upstream at the same size; without any, the 400 is the answer.
- **Per model**: an upstream with a `models` map takes only the requests whose model it
  names (`*`: any other), sent with the model it maps to; one with `model` rewrites every
  request's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .settings import RouteSettings, UpstreamSettings

__all__ = ["FailoverPlan", "Step", "Trouble"]

# Why an attempt is to be followed by another: a one-off failure, silence, a server's wait
# beyond the route's bound, an input over the model's context window.
Trouble = Literal["once", "silence", "wait_too_long", "context_window"]


@dataclass(frozen=True, slots=True)
class Step:
    """One attempt: the upstream's place in the route (`RouteSettings.upstreams`), the model
    it is sent with (None: the request's own), whether it tries the same upstream as the
    attempt before, and how many times this upstream was tried before."""

    index: int
    model: str | None
    same: bool
    tries: int


class FailoverPlan:
    """The attempts of one request in their order (see the module docstring): `first`, then
    `next(trouble)` until None (`peek` says what `next` would give without taking it)."""

    def __init__(self, route: RouteSettings, requested: str | None) -> None:
        ordinary = 1 + len(route.fallbacks)
        upstreams = route.upstreams
        self._retries = route.retries.attempts
        self._settings = upstreams
        # The ordinary chain and the context chain, each the upstreams that take this model.
        self._chain = self._taking(range(ordinary), requested)
        self._context = self._taking(range(ordinary, len(upstreams)), requested)
        self._in_context = False
        self._position = 0  # in the current chain
        self._tries = 0  # attempts on the current upstream before this one
        if not self._chain:  # the route's own upstream takes every request
            self._chain = [(0, upstreams[0].model)]
        self.first = Step(self._chain[0][0], self._chain[0][1], False, 0)
        self.current = self.first

    def _taking(self, indexes: range, requested: str | None) -> list[tuple[int, str | None]]:
        taking: list[tuple[int, str | None]] = []
        for index in indexes:
            takes, model = self._settings[index].model_for(requested)
            if takes:
                taking.append((index, model))
        return taking

    def _retries_of(self, upstream: UpstreamSettings) -> int:
        return self._retries if upstream.retries is None else upstream.retries

    def peek(self, trouble: Trouble) -> Step | None:
        """The attempt `next(trouble)` would give (None: none is left)."""
        return self._after(trouble)[0]

    def next(self, trouble: Trouble) -> Step | None:
        """The next attempt after the current one failed so (None: none is left)."""
        step, in_context, position = self._after(trouble)
        if step is not None:
            self._in_context, self._position = in_context, position
            self._tries = step.tries
            self.current = step
        return step

    def _after(self, trouble: Trouble) -> tuple[Step | None, bool, int]:
        if trouble == "context_window":
            if self._in_context:  # a context fall-back too small: the next one, if any
                return self._moved(self._context, True, self._position + 1)
            return self._moved(self._context, True, 0)
        chain = self._context if self._in_context else self._chain
        index, model = chain[self._position]
        can_repeat = self._tries < self._retries_of(self._settings[index])
        moved = self._moved(chain, self._in_context, self._position + 1)
        if trouble == "once":
            if can_repeat:
                return Step(index, model, True, self._tries + 1), self._in_context, self._position
            return moved
        if trouble == "silence":
            if moved[0] is not None or not can_repeat:
                return moved
            return Step(index, model, True, self._tries + 1), self._in_context, self._position
        return moved  # wait_too_long: never the upstream that asked for the wait

    def _moved(
        self, chain: list[tuple[int, str | None]], in_context: bool, position: int
    ) -> tuple[Step | None, bool, int]:
        if position >= len(chain):
            return None, in_context, position
        index, model = chain[position]
        return Step(index, model, False, 0), in_context, position
