"""SIGINT and SIGTERM for commands that drive runs in the foreground (`gormes run`,
`gormes fork`): the runs are cancelled and record `run.cancelled` ("interrupted by
SIGINT"), instead of the process dying with its runs left with no end (which
would read as `running` for ever).

    async with RunManager.open(store, ...) as runs:
        async with cancel_runs_on_signals(runs) as received:
            outcome = await ...
    code = interrupted_exit_code(received)  # 128 + the signal's number, or None
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@asynccontextmanager
async def cancel_runs_on_signals(runs: Any) -> AsyncIterator[list[int]]:
    """While the block runs, each SIGINT or SIGTERM cancels every run of `runs` (a
    RunManager); the list it yields collects the signals received."""
    received: list[int] = []
    with trio.open_signal_receiver(*SIGNALS) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for signum in signals:
                    received.append(signum)
                    runs.cancel_all(f"interrupted by {signal.Signals(signum).name}")

            nursery.start_soon(watch)
            yield received
            nursery.cancel_scope.cancel()


def interrupted_exit_code(received: list[int]) -> int | None:
    """The shell's convention for a command ended by a signal: 128 + its number."""
    return 128 + received[0] if received else None
