"""The range of each number a job's submitter may choose, written once.

`rules.validate_options` checks every submission against these, whichever door it
came through (the CLI, MCP, a run, cron), and refuses a value outside its range
(`max_stalled` alone is clamped into its range instead); `gormes jobs submit`
shows the same ranges in its help. The CLI does not check them itself: a value
out of range reaches the operation, so its refusal is audited (decision 0019).
The outer bounds are gormes/events/jobs.py's (`MAX_DELAY_MS`, ...).

The statuses, child policies and backoff kinds are the Literals of
gormes/events/jobs.py (`STATUSES`, `TERMINAL`, `POLICIES`, `BACKOFF_KINDS`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gormes.events.jobs import (
    MAX_ATTEMPTS, MAX_CHILDREN, MAX_CONCURRENCY, MAX_DELAY_MS, MAX_WAITING, PRIORITY_RANGE,
    JobOptions,
)


class Bounds(NamedTuple):
    low: int
    high: int
    clamped: bool = False  # brought into the range instead of refused

    def holds(self, value: float | None) -> bool:
        return value is None or self.low <= value <= self.high  # NaN holds nowhere

    def clamp(self, value: int) -> int:
        return min(max(value, self.low), self.high)

    def __str__(self) -> str:
        return f"{self.low}..{self.high}"


# Keyed by the JobOptions field ("backoff.delay_ms": a field of `backoff`), in the
# order `validate_options` checks them.
OPTION_BOUNDS: dict[str, Bounds] = {
    "priority": Bounds(*PRIORITY_RANGE),
    "delay_ms": Bounds(0, MAX_DELAY_MS),
    "max_attempts": Bounds(1, MAX_ATTEMPTS),
    "backoff.delay_ms": Bounds(0, MAX_DELAY_MS),
    "backoff.jitter": Bounds(0, 1),
    "timeout_ms": Bounds(1, MAX_DELAY_MS),
    "max_children": Bounds(0, MAX_CHILDREN),
    "max_waiting": Bounds(1, MAX_WAITING),
    "max_stalled": Bounds(1, 100, clamped=True),
    "concurrency_limit": Bounds(1, MAX_CONCURRENCY),
    "debounce_ms": Bounds(1, MAX_DELAY_MS),
    "debounce_max_ms": Bounds(1, MAX_DELAY_MS),
}


def option_value(options: JobOptions, field: str) -> Any:
    """The value of `field` ("backoff.jitter") in `options`."""
    value: Any = options
    for part in field.split("."):
        value = getattr(value, part)
    return value
