"""A small OTLP/HTTP receiver for the tests: it takes POSTs on /v1/traces as a
collector does, decodes each body as an `ExportTraceServiceRequest` with
opentelemetry-proto's own types, and keeps the spans it received."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest, ExportTraceServiceResponse,
)


@dataclass
class Received:
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    refuse: bool = False  # answer 400 (not retried by the SDK) instead of taking the spans
    lock: threading.Lock = field(default_factory=threading.Lock)

    def spans(self) -> list[Any]:
        with self.lock:
            return [span for request in self.requests for rs in request.resource_spans
                    for ss in rs.scope_spans for span in ss.spans]

    def service_names(self) -> set[str]:
        with self.lock:
            return {a.value.string_value for r in self.requests for rs in r.resource_spans
                    for a in rs.resource.attributes if a.key == "service.name"}


def attributes(span: Any) -> dict[str, Any]:
    """A proto span's attributes as plain values."""
    out: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            out[kv.key] = [v.string_value for v in value.array_value.values]
        else:
            out[kv.key] = getattr(value, kind)
    return out


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    """(base URL, what it received): give the URL as OTEL_EXPORTER_OTLP_ENDPOINT."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_response(404)
                self.end_headers()
                return
            if received.refuse:
                self.send_response(400)
                self.end_headers()
                return
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            with received.lock:
                received.requests.append(request)
                received.headers.append({k.lower(): v for k, v in self.headers.items()})
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
