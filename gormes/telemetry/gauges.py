"""What the daemon tells the metrics of its workers (kept apart: the daemon
imports it without prometheus-client)."""

from __future__ import annotations

from typing import Any

import msgspec


class WorkerGauge(msgspec.Struct, frozen=True, kw_only=True):
    """What the daemon knows of one of its workers, in memory."""

    worker_id: str
    limit: int
    active: int
    governor: dict[str, Any] | None = None  # Governor.report()
