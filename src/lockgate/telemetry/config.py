"""Whether OpenTelemetry export is on, read from the standard `OTEL_*` variables.

Off unless configured: `OTEL_SDK_DISABLED=true` turns it off whatever else is set; otherwise
it is on when `OTEL_TRACES_EXPORTER` or `OTEL_METRICS_EXPORTER` names `otlp`, or an OTLP
endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`). This module imports nothing of OpenTelemetry; the
implementation (`lockgate.telemetry.otel`, the `otel` extra) is imported only when on.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import NO_TRACING, Tracing
from .settings import (
    EXPERIMENTAL_OPT_IN,
    MISSING_EXTRA,
    OtelSettings,
    OtlpProtocol,
    TelemetryConfigError,
    provider_name,
)

__all__ = [
    "EXPERIMENTAL_OPT_IN",
    "MISSING_EXTRA",
    "OtelSettings",
    "TelemetryConfigError",
    "otel_settings",
    "provider_name",
    "tracing_from_environment",
]


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def _list(value: str | None) -> list[str]:
    return [part.strip().lower() for part in (value or "").split(",") if part.strip()]


def _pairs(value: str | None) -> tuple[tuple[str, str], ...]:
    """`k=v,k=v` (URL-encoded values), as the SDK reads `OTEL_RESOURCE_ATTRIBUTES` and
    `OTEL_EXPORTER_OTLP_HEADERS`; malformed entries are skipped."""
    from urllib.parse import unquote

    pairs: list[tuple[str, str]] = []
    for part in (value or "").split(","):
        key, sep, item = part.partition("=")
        if sep and key.strip():
            pairs.append((unquote(key.strip()), unquote(item.strip())))
    return tuple(pairs)


def _protocol(environ: Mapping[str, str], signal: str) -> OtlpProtocol:
    value = (
        environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    value = value.strip().lower()
    if value == "grpc":
        return "grpc"
    if value in ("http/protobuf", "http"):
        return "http/protobuf"
    raise TelemetryConfigError(
        f"lockgate: OTEL_EXPORTER_OTLP_PROTOCOL {value!r} is not supported "
        "(use grpc or http/protobuf)"
    )


def _endpoint(environ: Mapping[str, str], signal: str, protocol: OtlpProtocol) -> str | None:
    specific = environ.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT", "").strip()
    if specific:
        return specific
    general = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if not general:
        return None
    if protocol == "grpc":
        return general
    # As the specification says: the general endpoint is a base, the signal's path appended.
    return general.rstrip("/") + "/v1/" + signal.lower()


def otel_settings(environ: Mapping[str, str]) -> OtelSettings | None:
    """The export `environ` asks for, or None when OpenTelemetry is off."""
    if _flag(environ.get("OTEL_SDK_DISABLED")):
        return None
    traces_exporters = _list(environ.get("OTEL_TRACES_EXPORTER"))
    metrics_exporters = _list(environ.get("OTEL_METRICS_EXPORTER"))
    any_endpoint = any(
        environ.get(name, "").strip()
        for name in (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        )
    )
    if "otlp" not in traces_exporters + metrics_exporters and not any_endpoint:
        return None
    # An exporter variable left unset means the default (otlp) once export is on; `none`
    # (or any list without otlp) turns that signal off.
    traces = "otlp" in traces_exporters if traces_exporters else True
    metrics = "otlp" in metrics_exporters if metrics_exporters else True
    if not (traces or metrics):
        return None
    traces_protocol = _protocol(environ, "TRACES")
    metrics_protocol = _protocol(environ, "METRICS")
    resource = _pairs(environ.get("OTEL_RESOURCE_ATTRIBUTES"))
    service = environ.get("OTEL_SERVICE_NAME", "").strip() or dict(resource).get(
        "service.name", "lockgate"
    )
    return OtelSettings(
        traces=traces,
        metrics=metrics,
        traces_protocol=traces_protocol,
        metrics_protocol=metrics_protocol,
        traces_endpoint=_endpoint(environ, "TRACES", traces_protocol),
        metrics_endpoint=_endpoint(environ, "METRICS", metrics_protocol),
        headers=_pairs(environ.get("OTEL_EXPORTER_OTLP_HEADERS")),
        service_name=service,
        resource=resource,
        experimental=EXPERIMENTAL_OPT_IN in _list(environ.get("OTEL_SEMCONV_STABILITY_OPT_IN")),
    )


def tracing_from_environment(environ: Mapping[str, str]) -> Tracing:
    """`NO_TRACING` unless `environ` configures OpenTelemetry; then the OpenTelemetry tracer
    (`lockgate.telemetry.otel.OtelTracing`, whose `close()` flushes and stops the export).

    Raises `TelemetryConfigError` (print its `str()`, one line) when OpenTelemetry is
    configured but the `otel` extra is not installed or the configuration is unusable."""
    settings = otel_settings(environ)
    if settings is None:
        return NO_TRACING
    from .otel import OtelTracing  # imports OpenTelemetry only when constructed

    return OtelTracing(settings)
