"""What the daemon runs of telemetry: `/metrics` when a port is set, the trace
follower when an OTLP endpoint is configured (both off by default).

The heavy libraries are imported only for what is turned on: prometheus-client
for a metrics port, the OpenTelemetry SDK for an endpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import trio

from gormes.events.store import EventStore
from gormes.telemetry import otlp_config
from gormes.telemetry.gauges import WorkerGauge

log = logging.getLogger("gormes.telemetry")
KEEP_ON_STOP_S = 5.0  # a stopping daemon waits this long at most to keep the metrics' counters

__all__ = ["WorkerGauge", "start"]


async def start(nursery: trio.Nursery, store: EventStore, metrics_port: int | None,
                workers: Callable[[], Sequence[WorkerGauge]]) -> None:
    if metrics_port is not None:
        await nursery.start(_serve_metrics, store, metrics_port, workers)
    if otlp_config.configured():
        await nursery.start(_follow_traces, store)


async def _serve_metrics(store: EventStore, port: int, workers: Callable[[], Sequence[WorkerGauge]], *,
                         task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    # prometheus-client only when a metrics port is set
    from gormes.telemetry.metrics import KEEP_EVERY_S, LogMetrics, MetricsServer

    collector = LogMetrics(store, workers=workers)
    await collector.prepare()  # the kept counters taken up; the gateways' refusals counted from here
    server = MetricsServer(collector, port)
    log.info("metrics: http://127.0.0.1:%d/metrics", server.port)
    task_status.started(server.port)
    try:
        while True:  # the counters kept for the next daemon (decision 0084)
            await trio.sleep(KEEP_EVERY_S)
            await collector.keep()
    finally:
        server.close()
        with trio.move_on_after(KEEP_ON_STOP_S) as stopping:
            stopping.shield = True
            await collector.keep()


async def _follow_traces(store: EventStore, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    # the OpenTelemetry SDK only when an endpoint is configured
    from gormes.telemetry.follower import TraceFollower
    from gormes.telemetry.otlp import SpanSender

    sender = SpanSender()
    follower = TraceFollower(store, sender)
    log.info("traces: exporting runs and job attempts as they end to %s (from log position %d)",
             sender.endpoint, await follower.prepare())
    task_status.started()
    try:
        await follower.run()
    finally:
        sender.close()
