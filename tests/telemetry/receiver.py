"""Loopback OTLP receivers for tests and benchmarks: one over HTTP (`POST /v1/traces`,
`/v1/metrics`, protobuf bodies) and one over gRPC (the collector's TraceService and
MetricsService). Each keeps every request's raw bytes and its decoded export request.

    with HttpReceiver() as receiver:   # or GrpcReceiver()
        environ = receiver.environ()   # OTEL_* pointing an exporter at it
        ...
        receiver.spans(), receiver.metrics(), receiver.raw()

Needs the `otel` extra (opentelemetry-proto, grpcio for the gRPC one).
"""

from __future__ import annotations

import gzip
import importlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span

__all__ = ["GrpcReceiver", "HttpReceiver", "Received", "attributes"]


@dataclass
class Received:
    """What a receiver was sent (appended from its server threads)."""

    raw: list[bytes] = field(default_factory=list)
    traces: list[ExportTraceServiceRequest] = field(default_factory=list)
    metric_requests: list[ExportMetricsServiceRequest] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def trace(self, body: bytes, path: str = "") -> None:
        request = ExportTraceServiceRequest.FromString(body)
        with self.lock:
            self.raw.append(body)
            self.traces.append(request)
            self.paths.append(path)

    def metric(self, body: bytes, path: str = "") -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        with self.lock:
            self.raw.append(body)
            self.metric_requests.append(request)
            self.paths.append(path)


def attributes(item: Any) -> dict[str, object]:
    """A span's, event's or data point's attributes as Python values."""
    values: dict[str, object] = {}
    for pair in item.attributes:
        kind = pair.value.WhichOneof("value")
        if kind == "array_value":
            array = pair.value.array_value.values
            values[pair.key] = tuple(getattr(v, str(v.WhichOneof("value"))) for v in array)
        else:
            values[pair.key] = getattr(pair.value, kind) if kind else None
    return values


class _Receiver:
    received: Received
    protocol: str  # OTEL_EXPORTER_OTLP_PROTOCOL

    @property
    def endpoint(self) -> str:
        raise NotImplementedError

    def environ(self) -> dict[str, str]:
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": self.protocol,
        }

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def spans(self) -> list[Span]:
        return [
            span
            for request in self.received.traces
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def resources(self) -> list[dict[str, object]]:
        return [
            attributes(resource.resource)
            for request in self.received.traces
            for resource in request.resource_spans
        ]

    def metrics(self) -> list[Metric]:
        return [
            metric
            for request in self.received.metric_requests
            for resource in request.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        ]

    def raw(self) -> bytes:
        return b"".join(self.received.raw)

    def __iter__(self) -> Iterator[Span]:
        return iter(self.spans())


class _Handler(BaseHTTPRequestHandler):
    received: Received

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path == "/v1/traces":
            self.received.trace(body, self.path)
            answer = ExportTraceServiceResponse().SerializeToString()
        elif self.path == "/v1/metrics":
            self.received.metric(body, self.path)
            answer = ExportMetricsServiceResponse().SerializeToString()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class HttpReceiver(_Receiver):
    """OTLP/HTTP (protobuf) on 127.0.0.1, an ephemeral port."""

    protocol = "http/protobuf"

    def __init__(self) -> None:
        self.received = Received()
        handler = type("Handler", (_Handler,), {"received": self.received})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class GrpcReceiver(_Receiver):
    """OTLP/gRPC (insecure) on 127.0.0.1, an ephemeral port."""

    protocol = "grpc"

    def __init__(self) -> None:
        grpc: Any = importlib.import_module("grpc")
        traces: Any = importlib.import_module(
            "opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc"
        )
        metrics: Any = importlib.import_module(
            "opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc"
        )
        self.received = received = Received()

        class TraceService(traces.TraceServiceServicer):  # type: ignore[misc]
            def Export(self, request: ExportTraceServiceRequest, context: Any) -> Any:
                received.trace(request.SerializeToString())
                return ExportTraceServiceResponse()

        class MetricsService(metrics.MetricsServiceServicer):  # type: ignore[misc]
            def Export(self, request: ExportMetricsServiceRequest, context: Any) -> Any:
                received.metric(request.SerializeToString())
                return ExportMetricsServiceResponse()

        self._server: Any = grpc.server(ThreadPoolExecutor(max_workers=4))
        traces.add_TraceServiceServicer_to_server(TraceService(), self._server)
        metrics.add_MetricsServiceServicer_to_server(MetricsService(), self._server)
        self.port: int = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop(None)
