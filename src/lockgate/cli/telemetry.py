"""OpenTelemetry for the commands: the tracer `OTEL_*` configures (none when it does not),
or the usage error (one line) when it is configured but cannot be used."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .codes import UsageError

if TYPE_CHECKING:
    from ..telemetry.otel import OtelTracing

__all__ = ["environment_tracing"]


def environment_tracing() -> OtelTracing | None:
    """The OpenTelemetry tracer when `OTEL_*` configures one; a usage error (one line) when
    it is configured but the `otel` extra is not installed."""
    from ..telemetry.config import TelemetryConfigError, tracing_from_environment
    from ..telemetry.otel import OtelTracing

    try:
        tracing = tracing_from_environment(os.environ)
    except TelemetryConfigError as exc:
        raise UsageError(str(exc).removeprefix("lockgate: ")) from None
    return tracing if isinstance(tracing, OtelTracing) else None
