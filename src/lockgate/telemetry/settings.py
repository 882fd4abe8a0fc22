"""What OpenTelemetry export uses, shared by the configuration and the implementation:
the settings read from `OTEL_*`, the one error, the provider names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "EXPERIMENTAL_OPT_IN",
    "MISSING_EXTRA",
    "OtelSettings",
    "OtlpProtocol",
    "TelemetryConfigError",
    "provider_name",
]

MISSING_EXTRA = (
    "lockgate: OTEL_* is set but the otel extra is not installed: pip install 'lockgate[otel]'"
)

# The GenAI conventions' opt-in to their latest experimental attributes and events.
EXPERIMENTAL_OPT_IN = "gen_ai_latest_experimental"

# lockgate's protocols as the conventions' `gen_ai.provider.name` values.
_PROVIDERS = {
    "responses": "openai",
    "chat": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "bedrock": "aws.bedrock",
}

OtlpProtocol = Literal["grpc", "http/protobuf"]


class TelemetryConfigError(ValueError):
    """OpenTelemetry is configured but cannot be used; `str()` is the one line to print."""


@dataclass(frozen=True, slots=True)
class OtelSettings:
    """What `OTEL_*` asks for. Endpoints are None where the exporter's default applies;
    `service_name` and `resource` are read as the SDK reads them."""

    traces: bool
    metrics: bool
    traces_protocol: OtlpProtocol
    metrics_protocol: OtlpProtocol
    traces_endpoint: str | None
    metrics_endpoint: str | None
    headers: tuple[tuple[str, str], ...]
    service_name: str
    resource: tuple[tuple[str, str], ...]
    experimental: bool


def provider_name(protocol: str | None) -> str | None:
    """The conventions' `gen_ai.provider.name` for a lockgate protocol (an unknown protocol:
    its own name; None: none)."""
    if protocol is None:
        return None
    return _PROVIDERS.get(protocol, protocol)
