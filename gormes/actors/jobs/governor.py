"""The resource governor: how many jobs a worker may run at once, given the load.

Every `interval_s` the governor samples CPU and memory use. Above `cpu_high` or
`memory_high` it halves the worker's effective concurrency (never below the
floor); below `cpu_low` and `memory_low` it raises it by a step (never above the
ceiling); in between it holds. At or above `memory_breaker` it also trips the
circuit breaker: the worker cancels its lowest-priority active job as
unrecoverable ("circuit breaker: memory pressure"), one job per sample.

The sampler is injectable, so tests drive the governor with chosen loads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec
import trio

BREAKER_ERROR = "circuit breaker: memory pressure"


class LoadSample(msgspec.Struct, frozen=True):
    cpu_percent: float
    memory_percent: float


Sampler = Callable[[], LoadSample]


def psutil_sampler() -> Sampler:
    """CPU use since the previous call (all cores) and virtual memory in use."""
    import psutil

    psutil.cpu_percent(interval=None)  # prime: the first call always reads 0.0

    def sample() -> LoadSample:
        return LoadSample(
            cpu_percent=psutil.cpu_percent(interval=None),
            memory_percent=psutil.virtual_memory().percent,
        )

    return sample


class GovernorPolicy(msgspec.Struct, frozen=True, kw_only=True):
    floor: int = 1
    ceiling: int = 10
    cpu_high: float = 90.0
    cpu_low: float = 70.0
    memory_high: float = 85.0
    memory_low: float = 75.0
    memory_breaker: float = 95.0
    interval_s: float = 1.0

    def __post_init__(self) -> None:
        if not 1 <= self.floor <= self.ceiling:
            raise ValueError(f"governor wants 1 <= floor <= ceiling, got {self.floor}..{self.ceiling}")


class Decision(msgspec.Struct, frozen=True):
    limit: int
    trip_breaker: bool


def decide(policy: GovernorPolicy, limit: int, sample: LoadSample) -> Decision:
    """The next concurrency limit for a sample (pure: no clock, no I/O)."""
    overloaded = sample.cpu_percent > policy.cpu_high or sample.memory_percent > policy.memory_high
    relaxed = sample.cpu_percent < policy.cpu_low and sample.memory_percent < policy.memory_low
    if overloaded:
        new = max(policy.floor, limit // 2)
    elif relaxed:
        step = max(1, policy.ceiling // 8)
        new = min(policy.ceiling, limit + step)
    else:
        new = limit
    return Decision(limit=max(policy.floor, min(policy.ceiling, new)),
                    trip_breaker=sample.memory_percent >= policy.memory_breaker)


class Governor:
    """Keeps `limit` current; calls `on_breaker` when memory crosses the breaker line."""

    def __init__(self, policy: GovernorPolicy, sampler: Sampler | None = None) -> None:
        self.policy = policy
        self._sampler = sampler
        self.limit = policy.ceiling
        self.last_sample: LoadSample | None = None
        self._on_change: list[Callable[[int], None]] = []

    def on_change(self, callback: Callable[[int], None]) -> None:
        self._on_change.append(callback)

    def observe(self, sample: LoadSample) -> Decision:
        decision = decide(self.policy, self.limit, sample)
        self.last_sample = sample
        if decision.limit != self.limit:
            self.limit = decision.limit
            for callback in self._on_change:
                callback(self.limit)
        return decision

    async def run(self, on_breaker: Callable[[], Awaitable[None]]) -> None:
        sampler = self._sampler or psutil_sampler()
        while True:
            await trio.sleep(self.policy.interval_s)
            sample = sampler()  # psutil reads /proc without blocking: no thread needed
            if self.observe(sample).trip_breaker:
                await on_breaker()
