"""Whether traces are to be sent, and where: read from the environment the
OpenTelemetry SDK reads, without importing the SDK (gormes/telemetry/otlp.py sends)."""

from __future__ import annotations

import os
from collections.abc import Mapping

_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def configured(endpoint: str | None = None, env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    if endpoint:
        return True
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(env.get(name) for name in _ENDPOINT_VARIABLES)


def endpoint_shown(endpoint: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """Where spans go, for people (as the SDK resolves it)."""
    env = os.environ if env is None else env
    if endpoint:
        return endpoint
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")
    return base.rstrip("/") + "/v1/traces"


def why_not_sent(env: Mapping[str, str] | None = None) -> str:
    """Why `configured` said no, for people."""
    env = os.environ if env is None else env
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return "OTEL_TRACES_EXPORTER=none turns exporting off (unset it, or give --endpoint)"
    return "no OTLP endpoint configured (set OTEL_EXPORTER_OTLP_ENDPOINT or give --endpoint)"
