"""Telemetry derived from the log: OpenTelemetry traces and Prometheus metrics.

- `spans`: pure functions, a run's or a job's recorded events to spans (GenAI
  semantic conventions), with ids derived from run ids and seqs.
- `read`: those spans read from the log (`run_trace`, `attempt_spans`).
- `otlp_config`: whether and where to send (the SDK's environment; no SDK import).
- `otlp`: sending them with the SDK's OTLP/HTTP exporter (imports the SDK).
- `follower`: the daemon's follower that exports runs and attempts as they end.
- `metrics`: a Prometheus collector that reads the ledger and projections at scrape
  time, and its loopback HTTP server (imports prometheus-client); `gauges`: what
  the daemon tells it of its workers.
- `daemon`: what `gormes daemon` starts of all this (each part only when turned on).

Nothing here is on a hot path: everything is read from what the log recorded.
See docs/observe.md.
"""
