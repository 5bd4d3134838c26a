"""Sending spans over OTLP/HTTP with the OpenTelemetry SDK's own exporter.

Off unless configured: `configured()` is true when `OTEL_EXPORTER_OTLP_ENDPOINT`
or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and `OTEL_TRACES_EXPORTER` is not
"none"), or an endpoint is given. The SDK's exporter reads the endpoint, headers
(`OTEL_EXPORTER_OTLP_HEADERS`, `..._TRACES_HEADERS`), timeout and compression
from the environment itself; `Resource.create()` reads `OTEL_SERVICE_NAME` and
`OTEL_RESOURCE_ATTRIBUTES`, and the service is "gormes" when neither names one.

The SDK is imported here only, and this module only by the commands that export
(`gormes trace`, the daemon's trace follower), so `gormes --help` never loads it.
Exporting blocks (HTTP, with the SDK's retries): call `send` from a thread.

The SDK's exporter says why a send failed only in its log lines (one per retry,
then one as it gives up), which Python would print under gormes' own error line.
`send` keeps them instead, and `failure` says in one line what they said.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.http import trace_exporter as _sdk_exporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Event as SdkEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

from gormes.telemetry.otlp_config import endpoint_shown
from gormes.telemetry.spans import Span

_KINDS = {"internal": trace_api.SpanKind.INTERNAL, "client": trace_api.SpanKind.CLIENT}
_STATUS = {"unset": StatusCode.UNSET, "ok": StatusCode.OK, "error": StatusCode.ERROR}
_SCOPE = InstrumentationScope("gormes.telemetry")


def resource() -> Resource:
    found = Resource.create()
    if str(found.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        found = found.merge(Resource({SERVICE_NAME: "gormes"}))
    return found


def readable(spans: Sequence[Span], where: Resource | None = None) -> list[ReadableSpan]:
    """The SDK's spans for ours: the same ids, times, attributes and status."""
    where = where or resource()
    flags = TraceFlags(TraceFlags.SAMPLED)
    out = []
    for span in spans:
        trace = int(span.trace_id, 16)
        context = SpanContext(trace, int(span.span_id, 16), is_remote=False, trace_flags=flags)
        parent = (
            SpanContext(trace, int(span.parent_span_id, 16), is_remote=False, trace_flags=flags)
            if span.parent_span_id else None
        )
        out.append(ReadableSpan(
            name=span.name, context=context, parent=parent, resource=where,
            attributes=_attributes(span.attributes),
            events=[SdkEvent(e.name, _attributes(e.attributes), timestamp=e.time_ns) for e in span.events],
            kind=_KINDS[span.kind],
            status=Status(_STATUS[span.status], span.status_message or None)
            if span.status == "error" else Status(_STATUS[span.status]),
            start_time=span.start_ns, end_time=span.end_ns, instrumentation_scope=_SCOPE,
        ))
    return out


def _attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


class SpanSender:
    """One OTLP/HTTP exporter; `send` blocks until the collector answered."""

    def __init__(self, endpoint: str | None = None) -> None:
        self.endpoint = endpoint_shown(endpoint)
        self._exporter = OTLPSpanExporter(endpoint=endpoint) if endpoint else OTLPSpanExporter()
        self._resource = resource()
        self.failure: str | None = None  # why the last send failed, in one line

    def send(self, spans: Sequence[Span]) -> bool:
        """True when the collector took them (an empty list is taken)."""
        self.failure = None
        if not spans:
            return True
        with _SdkLines() as lines:
            sent = self._exporter.export(readable(spans, self._resource)) is SpanExportResult.SUCCESS
        if not sent:
            self.failure = failure_of(lines.records)
        return sent

    def close(self) -> None:
        self._exporter.shutdown()


class _SdkLines(logging.Handler):
    """While open, the SDK exporter's log records are kept here and not printed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._logger = logging.getLogger(_sdk_exporter.__name__)
        self._propagate = self._logger.propagate

    def __enter__(self) -> _SdkLines:
        self._logger.addHandler(self)
        self._logger.propagate = False
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)
        self._logger.propagate = self._propagate

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


_OS_ERROR = re.compile(r"\[Errno -?\d+\] ([^\"'()]+)")
_STATUS_LINE = re.compile(r"batch code: (\d+), reason: (.*)")
_MAX_REASON = 200


def failure_of(records: Sequence[logging.LogRecord]) -> str:
    """One line from the SDK's lines about a failed send: the HTTP status it gave up
    on, or the error it retried (an OS error's text alone) and how often."""
    messages = [r.getMessage() for r in records]
    retries = sum(m.startswith("Transient error") for m in messages)
    for message in messages:
        if status := _STATUS_LINE.search(message):
            return f"HTTP {status.group(1)} {status.group(2)}"[:_MAX_REASON]
    reasons = [m for m in messages if m.startswith("Transient error")]
    if not reasons:
        return messages[-1][:_MAX_REASON] if messages else "no answer"
    os_error = _OS_ERROR.search(reasons[-1])
    reason = os_error.group(1).strip() if os_error else reasons[-1][len("Transient error "):]
    return (f"{reason[:_MAX_REASON]} (retried {retries} time(s) within the exporter's timeout, "
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT)")
