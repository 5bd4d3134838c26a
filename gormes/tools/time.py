"""time.now: the time from the executor's clock (injected, so tests and replays
control it)."""

from __future__ import annotations

from datetime import datetime, timezone

import msgspec

from gormes.ops.spec import OperationContext, OperationSpec


class TimeNowInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """No arguments."""


class TimeNowOutput(msgspec.Struct, kw_only=True):
    unix: float  # seconds since the epoch
    unix_ms: int
    iso: str  # UTC, ISO 8601


async def time_now(ctx: OperationContext, value: TimeNowInput) -> TimeNowOutput:
    now = ctx.clock()
    iso = datetime.fromtimestamp(now, tz=timezone.utc).isoformat(timespec="milliseconds")
    return TimeNowOutput(unix=now, unix_ms=int(now * 1000), iso=iso)


SPECS = (
    OperationSpec(
        name="time.now", description="The current date and time (UTC).",
        input_type=TimeNowInput, output_type=TimeNowOutput, handler=time_now,
        trust=frozenset({"operator", "gateway", "child-agent", "system"}),
        audit_kind="time.read", prompt_visible=True, timeout=1.0,
    ),
)
