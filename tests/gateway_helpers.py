"""Shared by the tests of the gateways' call rate: a settable clock, and an executor
that limits gateway callers as `gormes mcp` builds one (decision 0072)."""

from __future__ import annotations

from typing import Any

from gormes.control.call_rate import GatewayCallRate, parse_call_rate
from gormes.ops.executor import Executor
from gormes.tools.builtin import default_registry


class Clock:
    """Seconds since the epoch, moved by the test."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def limited(store: Any, rate: str, clock: Clock, client_rate: str = "off") -> Executor:
    """`rate` for the class, and `client_rate` for each client's share (decision 0082;
    "" the default, a quarter), both as `gormes mcp` reads them."""
    rule = parse_call_rate(rate)
    assert rule is not None
    if client_rate == "off":
        limit = GatewayCallRate(store, rule, clock=clock)
    else:
        from gormes.control.call_rate import parse_client_share

        limit = GatewayCallRate(store, rule, share=parse_client_share(client_rate, rule), clock=clock)
    return Executor(default_registry(), store, clock=clock, call_limit=limit)
