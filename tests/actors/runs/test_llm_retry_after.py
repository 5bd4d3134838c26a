"""A retryable provider failure waits at least the server's retry-after (capped)
before the next attempt; time is trio's MockClock (autojump), so no test waits."""

from __future__ import annotations

import pytest
import trio

from gormes.actors.runs.context import RunHandlerRegistry
from gormes.actors.runs.live import BACKOFF_MAX_S, RETRY_AFTER_MAX_S, retry_wait
from gormes.actors.runs.manager import RunManager
from gormes.events.runs import RunLlmFailed, RunLlmTurn, run_stream
from gormes.providers.base import Message, ModelReply, ModelRequest, ProviderError, Usage


class Throttled:
    """A provider that refuses `failures` times with `retry_after`, then answers;
    it keeps the (virtual) time of each call."""

    name = "stub:throttled"
    model = "throttled"

    def __init__(self, failures: int, retry_after: float | None) -> None:
        self.failures = failures
        self.retry_after = retry_after
        self.calls: list[float] = []

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.calls.append(trio.current_time())
        if len(self.calls) <= self.failures:
            raise ProviderError("429 slow down", retryable=True, status=429, retry_after=self.retry_after)
        return ModelReply(message=Message(role="assistant", content="ok"), usage=Usage(input=3, output=1),
                          finish_reason="stop", model=self.model)


async def ask_once(ctx, input):
    reply = await ctx.llm(ModelRequest(model=ctx.model_name, messages=(Message(role="user", content="hi"),)))
    return reply.message.content


async def run_with(store, provider: Throttled, backoff_s: float = 0.2):
    handlers = RunHandlerRegistry({"ask": ask_once})
    async with RunManager.open(store, handlers=handlers, providers=lambda spec: provider,
                               llm_backoff_s=backoff_s) as runs:
        return await runs.run("ask", None, model="stub:throttled")


@pytest.mark.parametrize(("retry_after", "backoff_s", "gap"), [
    (7.0, 0.2, 7.0),  # the server asks for longer than our backoff: its wait
    (1.0, 5.0, 5.0),  # for less: our backoff
    (None, 0.5, 0.5),  # says nothing: our backoff
    (10_000.0, 0.2, RETRY_AFTER_MAX_S),  # far too long: capped
])
async def test_the_next_attempt_waits_at_least_the_retry_after(store, autojump_clock, retry_after, backoff_s,
                                                               gap) -> None:
    provider = Throttled(failures=1, retry_after=retry_after)
    outcome = await run_with(store, provider, backoff_s)
    assert outcome.status == "completed" and outcome.result == "ok"
    first, second = provider.calls
    assert gap <= second - first < gap + 1.0
    kinds = [type(r.event) for r in await store.read_stream(run_stream(outcome.run_id))]
    assert kinds.count(RunLlmFailed) == 1 and kinds.count(RunLlmTurn) == 1


def test_the_wait_is_the_backoff_or_the_servers_and_is_bounded() -> None:
    def error(retry_after):
        return ProviderError("x", retryable=True, retry_after=retry_after)

    assert retry_wait(error(None), 0.2, 1) == 0.2
    assert retry_wait(error(None), 0.2, 3) == 0.8
    assert retry_wait(error(None), 10.0, 9) == BACKOFF_MAX_S
    assert retry_wait(error(3.0), 0.2, 1) == 3.0
    assert retry_wait(error(0.1), 0.2, 2) == 0.4
    assert retry_wait(error(float("inf")), 0.2, 1) == RETRY_AFTER_MAX_S
    assert retry_wait(error(-5.0), 0.2, 1) == 0.2
    assert retry_wait(ProviderError("x", retryable=True), 0.2, 1) == 0.2
