"""The OpenTelemetry tracer (the `otel` extra): GenAI semantic-convention spans and metrics,
exported over OTLP (HTTP or gRPC) by providers of its own (the process's global providers
are never touched).

Importing this module imports nothing of OpenTelemetry; constructing `OtelTracing` does.
Build it with `lockgate.telemetry.config.tracing_from_environment`. `close()` flushes what is
pending and stops the export: call it once, when the proxy (or the run) stops.

What is recorded is only what `RequestSummary`/`TurnSummary` carry: names, counts, times and
low-cardinality kinds. No prompt, argument, key, token or URL path reaches an attribute.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..version import __version__
from . import NO_TRACING, AttemptTrace, RequestSummary, RequestTrace, TokenUsage
from .settings import MISSING_EXTRA, OtelSettings, TelemetryConfigError, provider_name

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram, Meter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

    from .client import TurnSummary

__all__ = [
    "DURATION_BUCKETS",
    "GUARDRAIL_EVENT",
    "TOKEN_BUCKETS",
    "OtelTracing",
]

# The conventions' advised bucket boundaries (gen-ai-metrics.md).
DURATION_BUCKETS: Sequence[float] = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
TOKEN_BUCKETS: Sequence[float] = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip

# What the gate did with a response, as a span event. No convention names it yet (see
# docs/opentelemetry.md): emitted only under the opt-in
# OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental.
GUARDRAIL_EVENT = "gen_ai.guardrail.result"

Attributes = dict[str, str | bool | int | float | Sequence[str]]


class _Clock:
    """Monotonic seconds (`time.monotonic()`) to epoch nanoseconds, anchored once."""

    __slots__ = ("_epoch_ns", "_monotonic")

    def __init__(self) -> None:
        self._monotonic = time.monotonic()
        self._epoch_ns = time.time_ns()

    def ns(self, monotonic: float) -> int:
        return self._epoch_ns + round((monotonic - self._monotonic) * 1e9)


def _common(
    operation: str, protocol: str | None, request_model: str | None, response_model: str | None
) -> Attributes:
    attributes: Attributes = {"gen_ai.operation.name": operation}
    provider = provider_name(protocol)
    if provider is not None:
        attributes["gen_ai.provider.name"] = provider
    if request_model:
        attributes["gen_ai.request.model"] = request_model
    if response_model:
        attributes["gen_ai.response.model"] = response_model
    return attributes


def _span_name(operation: str, request_model: str | None) -> str:
    return f"{operation} {request_model}" if request_model else operation


def _usage_attributes(attributes: Attributes, usage: TokenUsage | None) -> None:
    if usage is None:
        return
    if usage.input_tokens is not None:
        attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
    if usage.output_tokens is not None:
        attributes["gen_ai.usage.output_tokens"] = usage.output_tokens


@dataclass(slots=True)
class _Attempt:
    """One attempt's span, held open until its request ends (its name and GenAI attributes
    are known only then), ended at the time the attempt ended."""

    span: Span
    number: int
    upstream: str
    fallback: bool
    headers_out: dict[str, str] = field(default_factory=dict)
    ended_at: int | None = None
    status: int | None = None
    error_type: str | None = None

    def headers(self) -> Mapping[str, str]:
        return self.headers_out

    def end(self, status: int | None, error_type: str | None) -> None:
        if self.ended_at is None:
            self.ended_at = time.time_ns()
            self.status = status
            self.error_type = error_type


class _Request:
    __slots__ = ("_attempts", "_ended", "_otel", "_span")

    def __init__(self, otel: OtelTracing, span: Span) -> None:
        self._otel = otel
        self._span = span
        self._attempts: list[_Attempt] = []
        self._ended = False

    def attempt(self, number: int, upstream: str, fallback: bool) -> AttemptTrace:
        try:
            return self._attempt(number, upstream, fallback)
        except Exception:  # an observer never fails a request: this attempt goes untraced
            return NO_TRACING.request({}, 0.0).attempt(number, upstream, fallback)

    def _attempt(self, number: int, upstream: str, fallback: bool) -> AttemptTrace:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind

        context = trace.set_span_in_context(self._span)
        span = self._otel.tracer.start_span(
            "attempt", context=context, kind=SpanKind.CLIENT, start_time=time.time_ns()
        )
        carrier: dict[str, str] = {}
        self._otel.propagator.inject(carrier, context=trace.set_span_in_context(span))
        attempt = _Attempt(span, number, upstream, fallback, carrier)
        self._attempts.append(attempt)
        return attempt

    def end(self, summary: RequestSummary) -> None:
        if self._ended:
            return
        self._ended = True
        with contextlib.suppress(Exception):  # an observer never fails a request
            self._otel.end_request(self._span, self._attempts, summary)


class OtelTracing:
    """`Tracing` over OpenTelemetry: a SERVER span per request, a CLIENT span per upstream
    attempt, the `gen_ai.server.*` metrics; and, for `lockgate run`, a CLIENT span per model
    turn with the `gen_ai.client.*` metrics (`turn`). `close()` flushes and stops."""

    def __init__(self, settings: OtelSettings) -> None:
        try:
            self._setup(settings)
        except ModuleNotFoundError as exc:
            if (exc.name or "").startswith(("opentelemetry", "grpc", "google")):
                raise TelemetryConfigError(MISSING_EXTRA) from None
            raise

    def _setup(self, settings: OtelSettings) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.settings = settings
        self.clock = _Clock()
        self.propagator = TraceContextTextMapPropagator()
        resource = Resource.create(
            {**dict(settings.resource), "service.name": settings.service_name}
        )
        headers = dict(settings.headers) or None
        self._tracer_provider: TracerProvider | None = None
        self._meter_provider: MeterProvider | None = None
        tracer_provider = TracerProvider(resource=resource)
        if settings.traces:
            processor = BatchSpanProcessor(_span_exporter(settings, headers))
            tracer_provider.add_span_processor(processor)
        self._tracer_provider = tracer_provider
        self.tracer: Tracer = tracer_provider.get_tracer("lockgate", __version__)
        readers = (
            [PeriodicExportingMetricReader(_metric_exporter(settings, headers))]
            if settings.metrics
            else []
        )
        meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        self._meter_provider = meter_provider
        meter: Meter = meter_provider.get_meter("lockgate", __version__)
        self.server_duration: Histogram = meter.create_histogram(
            "gen_ai.server.request.duration",
            unit="s",
            description="GenAI server request duration, admission to the last byte.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.server_first_token: Histogram = meter.create_histogram(
            "gen_ai.server.time_to_first_token",
            unit="s",
            description="Time to the first token of successful responses.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.client_duration: Histogram = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.token_usage: Histogram = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )

    # --- the proxy --------------------------------------------------------------------

    def request(self, client_headers: Mapping[str, str], started: float) -> RequestTrace:
        try:
            return self._request(client_headers, started)
        except Exception:  # an observer never fails a request: this one goes untraced
            return NO_TRACING.request(client_headers, started)

    def _request(self, client_headers: Mapping[str, str], started: float) -> RequestTrace:
        from opentelemetry.trace import SpanKind

        carrier = {
            key.lower(): value
            for key, value in client_headers.items()
            if key.lower() in ("traceparent", "tracestate")
        }
        parent = self.propagator.extract(carrier) if carrier else None
        span = self.tracer.start_span(
            "lockgate", context=parent, kind=SpanKind.SERVER, start_time=self.clock.ns(started)
        )
        return _Request(self, span)

    def end_request(self, span: Span, attempts: list[_Attempt], summary: RequestSummary) -> None:
        from opentelemetry.trace import Status, StatusCode

        common = _common(
            summary.operation, summary.protocol, summary.request_model, summary.response_model
        )
        name = _span_name(summary.operation, summary.request_model)
        last = attempts[-1] if attempts else None
        for attempt in attempts:
            attributes: Attributes = {
                **common,
                "lockgate.attempt": attempt.number,
                "lockgate.upstream": attempt.upstream,
                "lockgate.fallback": attempt.fallback,
            }
            if attempt.status is not None:
                attributes["http.response.status_code"] = attempt.status
            if attempt is last and attempt.error_type is None:
                if summary.finish_reasons:
                    attributes["gen_ai.response.finish_reasons"] = summary.finish_reasons
                _usage_attributes(attributes, summary.usage)
            if attempt.error_type is not None:
                attributes["error.type"] = attempt.error_type
                attempt.span.set_status(Status(StatusCode.ERROR))
            attempt.span.update_name(name)
            attempt.span.set_attributes(attributes)
            attempt.span.end(end_time=attempt.ended_at)

        attributes = {
            **common,
            "gen_ai.request.stream": summary.streaming,
            "lockgate.outcome": summary.outcome,
            "lockgate.calls.released": summary.released_calls,
            "lockgate.calls.withheld": summary.withheld_calls,
            "lockgate.retries": summary.retries,
        }
        if summary.status:
            attributes["http.response.status_code"] = summary.status
        if summary.finish_reasons:
            attributes["gen_ai.response.finish_reasons"] = summary.finish_reasons
        _usage_attributes(attributes, summary.usage)
        if summary.error_type is not None:
            attributes["error.type"] = summary.error_type
            span.set_status(Status(StatusCode.ERROR))
        span.update_name(name)
        span.set_attributes(attributes)
        metric = self._close(span, summary, self.server_duration, common)
        if summary.first_token_at is not None and summary.error_type is None:
            self.server_first_token.record(
                max(0.0, summary.first_token_at - summary.started), metric
            )
        self._tokens(summary.usage, metric)

    # --- `lockgate run` ---------------------------------------------------------------

    def turn(self, summary: TurnSummary) -> None:
        """One model turn as the client saw it: a CLIENT span `chat {model}` and the client
        metrics. Never raises."""
        with contextlib.suppress(Exception):  # an observer never fails a run
            self._turn(summary)

    def _turn(self, summary: TurnSummary) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        common = _common(
            summary.operation, summary.protocol, summary.request_model, summary.response_model
        )
        attributes: Attributes = {**common, "gen_ai.request.stream": True}
        if summary.finish_reasons:
            attributes["gen_ai.response.finish_reasons"] = summary.finish_reasons
        _usage_attributes(attributes, summary.usage)
        if summary.error_type is not None:
            attributes["error.type"] = summary.error_type
        span = self.tracer.start_span(
            _span_name(summary.operation, summary.request_model),
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=self.clock.ns(summary.started),
        )
        if summary.error_type is not None:
            span.set_status(Status(StatusCode.ERROR))
        metric = self._close(span, summary, self.client_duration, common)
        self._tokens(summary.usage, metric)

    # --- both -------------------------------------------------------------------------

    def _close(
        self,
        span: Span,
        summary: RequestSummary | TurnSummary,
        duration: Histogram,
        common: Attributes,
    ) -> Attributes:
        """End the span of a request or a turn (the guardrail event first, under the
        experimental conventions), record its duration, and return its metric attributes."""
        if self.settings.experimental:
            span.add_event(
                GUARDRAIL_EVENT,
                _guardrail(summary.released_calls, summary.withheld_calls, summary.error_type),
                timestamp=self.clock.ns(summary.ended),
            )
        span.end(end_time=self.clock.ns(summary.ended))
        metric: Attributes = dict(common)
        if summary.error_type is not None:
            metric["error.type"] = summary.error_type
        duration.record(max(0.0, summary.ended - summary.started), metric)
        return metric

    def _tokens(self, usage: TokenUsage | None, metric: Attributes) -> None:
        if usage is None:
            return
        for kind, count in (("input", usage.input_tokens), ("output", usage.output_tokens)):
            if count is not None:
                self.token_usage.record(count, {**metric, "gen_ai.token.type": kind})

    def force_flush(self, timeout_millis: int = 10_000) -> None:
        if self._tracer_provider is not None:
            self._tracer_provider.force_flush(timeout_millis)
        if self._meter_provider is not None:
            self._meter_provider.force_flush(timeout_millis)

    def close(self) -> None:
        """Flush what is pending and stop exporting (idempotent)."""
        tracer_provider, self._tracer_provider = self._tracer_provider, None
        meter_provider, self._meter_provider = self._meter_provider, None
        if tracer_provider is not None:
            tracer_provider.shutdown()
        if meter_provider is not None:
            meter_provider.shutdown()


def _guardrail(released: int, withheld: int, error_type: str | None) -> Attributes:
    attributes: Attributes = {
        "lockgate.gate.result": "withheld" if error_type is not None else "released",
        "lockgate.calls.released": released,
        "lockgate.calls.withheld": withheld,
    }
    if error_type is not None:
        attributes["error.type"] = error_type
    return attributes


def _span_exporter(settings: OtelSettings, headers: dict[str, str] | None) -> Any:
    endpoint = settings.traces_endpoint
    if settings.traces_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=endpoint, headers=headers)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HTTPSpanExporter,
    )

    return HTTPSpanExporter(endpoint=endpoint, headers=headers)


def _metric_exporter(settings: OtelSettings, headers: dict[str, str] | None) -> Any:
    endpoint = settings.metrics_endpoint
    if settings.metrics_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=endpoint, headers=headers)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HTTPMetricExporter,
    )

    return HTTPMetricExporter(endpoint=endpoint, headers=headers)
