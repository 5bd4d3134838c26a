"""Helpers shared by the run tests (imported by name; conftest is not importable)."""

from __future__ import annotations

from gormes.events.runs import run_stream


async def run_events(store, run_id: str) -> list:
    return [r.event for r in await store.read_stream(run_stream(run_id))]


async def types_of(store, run_id: str) -> list[str]:
    return [e.type for e in await run_events(store, run_id)]


async def wait_until(check, timeout: float = 5.0) -> None:
    """Poll an async `check()` until it is true (store writes finish in threads)."""
    import trio

    with trio.fail_after(timeout):
        while not await check():
            await trio.sleep(0.005)
