"""A deadline for a call to a local stand-in server, counted from when the server
took the request (and its queued reply): a deadline counted from before the request
is sent can fire first on a loaded machine, and the next call gets the wrong reply."""

from __future__ import annotations

from typing import Any

import trio


async def deadline_once_received(server: Any, scope: trio.CancelScope, after: float) -> None:
    """Set `scope`'s deadline `after` seconds after `server.requests` has one."""
    while not server.requests:
        await trio.sleep(0.005)
    scope.deadline = trio.current_time() + after
