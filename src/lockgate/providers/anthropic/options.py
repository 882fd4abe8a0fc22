"""The Anthropic provider's own options, each declared once (the command line makes its
flag from the declaration)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base import option, whole_number

MIN_THINKING_BUDGET = 1024  # the API's minimum


@dataclass(frozen=True, slots=True)
class AnthropicOptions:
    """`thinking_budget`: extended thinking with this many tokens (None: no thinking);
    `max_tokens` then carries the budget on top of the output cap."""

    thinking_budget: int | None = field(
        default=None,
        metadata=option(
            "--thinking-budget",
            metavar="N",
            parse=whole_number(MIN_THINKING_BUDGET, 10_000_000, "the API's minimum"),
            help="extended thinking with this token budget",
        ),
    )
