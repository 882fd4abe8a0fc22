"""The Gemini provider's own options, each declared once (the command line makes its flag
from the declaration)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base import option, whole_number

# Gemini's own minimum depends on the model (2.5 Flash takes 1, 2.5 Pro 128, Flash-Lite
# 512): lockgate takes any positive budget and lets the API say.
MIN_THINKING_BUDGET = 1


@dataclass(frozen=True, slots=True)
class GeminiOptions:
    """`thinking_budget`: thinking with this many tokens, the thoughts shown as reasoning
    (None: the model's default, no thoughts asked for); `maxOutputTokens` then carries the
    budget on top of the output cap."""

    thinking_budget: int | None = field(
        default=None,
        metadata=option(
            "--thinking-budget",
            metavar="N",
            parse=whole_number(MIN_THINKING_BUDGET, 10_000_000),
            help="thinking with this token budget, thoughts shown as reasoning",
        ),
    )
