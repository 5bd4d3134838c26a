"""Shared by the tests of the gateways' call rate: a settable clock, and an executor
that limits gateway callers as `gormes mcp` builds one (decision 0072)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from gormes.control.call_rate import GatewayCallRate, parse_call_rate, parse_client_share
from gormes.ops.executor import Executor
from gormes.ops.spec import CallRateLimited
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
    share = None if client_rate == "off" else parse_client_share(client_rate, rule)
    limit = GatewayCallRate(store, rule, share=share, clock=clock)
    return Executor(default_registry(), store, clock=clock, call_limit=limit)


async def outcomes_at_once(calls: int, call: Callable[[int], Awaitable[Any]]) -> list[str]:
    """`call(0)` ... `call(calls - 1)` at once: "served" for each that returned,
    "refused" for each the call rate refused, sorted."""
    outcomes: list[str] = []

    async def one(n: int) -> None:
        try:
            await call(n)
            outcomes.append("served")
        except CallRateLimited:
            outcomes.append("refused")

    async with trio.open_nursery() as nursery:
        for n in range(calls):
            nursery.start_soon(one, n)
    return sorted(outcomes)
