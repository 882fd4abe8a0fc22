"""The gate on the wire: a provider-neutral engine (`engine.GatingStream`) that takes a
native request and its native response stream and yields the stream a client may see, so
that a proxy or an HTTP transport can give any client lockgate's guarantee: a complete,
validated response can request an action; an incomplete one never reaches the client's
executor. Each provider's side is its gateway (`providers/<name>/gateway.py`, on the
`gateway.Gateway` seam)."""

from __future__ import annotations

from .engine import (
    DEFAULT_KEEPALIVE_SECONDS,
    HOLDS,
    MAX_WHOLE_BYTES,
    Accepted,
    GatingOptions,
    GatingStream,
    HeldBudget,
    Hold,
    Refused,
    WholeVerdict,
    capped_body,
    forwarded_headers,
    gates,
    judge_whole,
)
from .routes import route
from .transport import GatingTransport, gated_client

__all__ = [
    "DEFAULT_KEEPALIVE_SECONDS",
    "HOLDS",
    "MAX_WHOLE_BYTES",
    "Accepted",
    "GatingOptions",
    "GatingStream",
    "GatingTransport",
    "HeldBudget",
    "Hold",
    "Refused",
    "WholeVerdict",
    "capped_body",
    "forwarded_headers",
    "gated_client",
    "gates",
    "judge_whole",
    "route",
]
