"""The outage guard and the shared back-off: what one limit key's row says about
whether a model turn may leave now. Pure: no I/O, no clock (`now` is given).

One row per limit key (`provider_limits`, gormes/control/limits_table.py) is shared
by every worker on every host:

- `blocked_until`: a provider answered with a `retry-after` (a 429, a 503): every
  caller of that key waits until then, not only the one that was told.
- `failures`: consecutive retryable failures across every caller (a 5xx, a
  timeout, a dropped connection; a 429 is back-pressure, not an outage). At the
  threshold the guard opens (`open_since`): new model turns stop, and one turn at
  a time is let through as the probe (`probe_holder` until `probe_until`, so a
  probe whose process died frees the way). The first success, anyone's, closes it.
"""

from __future__ import annotations

import msgspec

RETRY_AFTER_MAX_S = 120.0  # as gormes/actors/runs/live.py caps one caller's wait
PROBE_TTL_S = 300.0  # a probe whose holder vanished (killed mid-turn) frees the way after this
PROBE_POLL_S = 1.0  # how often a turn waiting on someone's probe looks again


class ProviderState(msgspec.Struct, frozen=True, kw_only=True):
    key: str
    blocked_until: float | None = None
    blocked_reason: str | None = None
    failures: int = 0  # consecutive retryable failures, every caller's
    open_since: float | None = None  # the outage guard is open (new turns halted) since
    probe_holder: str | None = None  # the turn let through to probe, while the guard is open
    probe_until: float | None = None
    last_error: str | None = None
    updated_at: float = 0.0

    @property
    def is_open(self) -> bool:
        return self.open_since is not None

    def blocked(self, now: float) -> bool:
        return self.blocked_until is not None and self.blocked_until > now

    def probing(self, now: float) -> bool:
        return self.probe_holder is not None and self.probe_until is not None and self.probe_until > now

    @property
    def clear(self) -> bool:
        """Nothing to undo after a success: no failures counted, guard closed."""
        return self.failures == 0 and not self.is_open and self.probe_holder is None


class Wait(msgspec.Struct, frozen=True, kw_only=True):
    """Not now: look again at `until` (seconds on the limiter's clock)."""

    until: float
    reason: str


def guard(state: ProviderState, now: float, holder: str, *, probe_ttl_s: float = PROBE_TTL_S,
          poll_s: float = PROBE_POLL_S) -> ProviderState | Wait | None:
    """Before a turn: a Wait, or the row with `holder` as the probe (the guard is
    open and nobody probes), or None (go on: nothing to write)."""
    if state.blocked(now):
        assert state.blocked_until is not None
        return Wait(until=state.blocked_until, reason=f"{state.key} asked everyone to wait: {state.blocked_reason}")
    if not state.is_open:
        return None
    if state.probing(now) and state.probe_holder != holder:
        assert state.probe_until is not None
        return Wait(until=min(state.probe_until, now + poll_s),
                    reason=f"{state.key} is failing for everyone: waiting for the probe")
    return msgspec.structs.replace(state, probe_holder=holder, probe_until=now + probe_ttl_s, updated_at=now)


def failed(state: ProviderState, now: float, *, holder: str, error: str, retryable: bool,
           status: int | None, retry_after: float | None, threshold: int) -> ProviderState:
    """After a turn that failed: the back-off a `retry-after` asks of everyone, one
    more consecutive failure (a retryable one that is not a 429), the guard opened
    at the threshold, and the probe given up if this turn was it."""
    blocked_until, reason = state.blocked_until, state.blocked_reason
    if retry_after is not None:
        until = now + min(max(retry_after, 0.0), RETRY_AFTER_MAX_S)
        if blocked_until is None or until > blocked_until:
            blocked_until, reason = until, error
    failures, open_since = state.failures, state.open_since
    if retryable and status != 429:
        failures += 1
        if threshold and failures >= threshold and open_since is None:
            open_since = now
    probe_holder, probe_until = state.probe_holder, state.probe_until
    if probe_holder == holder:
        probe_holder, probe_until = None, None
    return msgspec.structs.replace(
        state, blocked_until=blocked_until, blocked_reason=reason, failures=failures,
        open_since=open_since, probe_holder=probe_holder, probe_until=probe_until,
        last_error=error, updated_at=now,
    )


def succeeded(state: ProviderState, now: float) -> ProviderState:
    """After a turn that got its reply: the provider works, for everyone."""
    if state.clear:
        return state
    return msgspec.structs.replace(
        state, failures=0, open_since=None, probe_holder=None, probe_until=None, updated_at=now)


def released(state: ProviderState, now: float, holder: str) -> ProviderState:
    """After a probe that ended with no answer either way (cancelled, or an error
    that is not the provider's): the next turn may probe."""
    if state.probe_holder != holder:
        return state
    return msgspec.structs.replace(state, probe_holder=None, probe_until=None, updated_at=now)
