"""When OpenTelemetry export is on, read from `OTEL_*` (no OpenTelemetry import needed)."""

from __future__ import annotations

import sys

import pytest

from lockgate.telemetry import NO_TRACING
from lockgate.telemetry.config import (
    MISSING_EXTRA,
    TelemetryConfigError,
    otel_settings,
    provider_name,
    tracing_from_environment,
)


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"OTEL_SERVICE_NAME": "x", "OTEL_RESOURCE_ATTRIBUTES": "a=b"},
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "console"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "TRUE"},
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "none",
        },
    ],
)
def test_off_unless_configured(environ: dict[str, str]) -> None:
    assert otel_settings(environ) is None
    assert tracing_from_environment(environ) is NO_TRACING


def test_an_endpoint_turns_both_signals_on_over_http_by_default() -> None:
    settings = otel_settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"})
    assert settings is not None
    assert settings.traces
    assert settings.metrics
    assert settings.traces_protocol == settings.metrics_protocol == "http/protobuf"
    assert settings.traces_endpoint == "http://collector:4318/v1/traces"
    assert settings.metrics_endpoint == "http://collector:4318/v1/metrics"
    assert settings.service_name == "lockgate"
    assert not settings.experimental


def test_signal_variables_protocols_and_resource() -> None:
    settings = otel_settings(
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4317",
            "OTEL_RESOURCE_ATTRIBUTES": "service.name=from-resource,"
            "deployment.environment=ci%20one",
            "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=a%3Db",
            "OTEL_SEMCONV_STABILITY_OPT_IN": "http, gen_ai_latest_experimental",
        }
    )
    assert settings is not None
    assert settings.traces
    assert not settings.metrics
    assert settings.traces_protocol == "grpc"
    assert settings.traces_endpoint == "http://traces:4317"
    assert settings.metrics_endpoint is None
    assert settings.service_name == "from-resource"
    assert ("deployment.environment", "ci one") in settings.resource
    assert settings.headers == (("x-tenant", "a=b"),)
    assert settings.experimental
    named = otel_settings({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SERVICE_NAME": "gate-1"})
    assert named is not None
    assert named.service_name == "gate-1"


def test_an_unknown_protocol_is_one_line() -> None:
    with pytest.raises(TelemetryConfigError, match="not supported"):
        otel_settings({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


def test_configured_without_the_extra_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # An absent package, as the import system reports it.
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.metrics", None)
    with pytest.raises(TelemetryConfigError) as raised:
        tracing_from_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"})
    assert str(raised.value) == MISSING_EXTRA
    assert "pip install 'lockgate[otel]'" in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("protocol", "provider"),
    [
        ("responses", "openai"),
        ("chat", "openai"),
        ("anthropic", "anthropic"),
        ("gemini", "gcp.gemini"),
        ("bedrock", "aws.bedrock"),
        ("ollama", "ollama"),
        (None, None),
    ],
)
def test_provider_names(protocol: str | None, provider: str | None) -> None:
    assert provider_name(protocol) == provider
