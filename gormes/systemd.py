"""The systemd notify protocol (sd_notify), spoken directly over NOTIFY_SOCKET.

systemd passes a datagram socket path in `NOTIFY_SOCKET` (a leading '@' means
the Linux abstract namespace) and, when the unit has WatchdogSec=, the interval in
`WATCHDOG_USEC` (and the pid it is meant for in `WATCHDOG_PID`). A message is
newline-separated `KEY=VALUE` assignments: READY=1, STATUS=..., WATCHDOG=1,
STOPPING=1, RELOADING=1. Without NOTIFY_SOCKET every call is a no-op, so the same
code runs under systemd, in a terminal and in tests.

    notifier = Notifier.from_environment()
    notifier.ready("serving")
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import MutableMapping

log = logging.getLogger("gormes.systemd")


def _address(raw: str) -> str | bytes:
    if raw.startswith("@"):
        return b"\0" + raw[1:].encode()
    return raw


class Notifier:
    def __init__(self, address: str | None, watchdog_usec: int | None = None) -> None:
        self.address = address or None
        self.watchdog_usec = watchdog_usec
        self._socket: socket.socket | None = None
        if self.address is not None:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            # Never let a full receive queue stall the event loop; a lost STATUS is harmless.
            self._socket.setblocking(False)

    @classmethod
    def from_environment(
        cls, environ: MutableMapping[str, str] = os.environ, *, unset: bool = True
    ) -> Notifier:
        """Read NOTIFY_SOCKET and the watchdog settings; by default remove them from
        the environment so that processes we start do not talk to systemd as us."""
        address = environ.get("NOTIFY_SOCKET")
        usec = _watchdog_usec(environ)
        if unset:
            for key in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
                environ.pop(key, None)
        return cls(address, usec)

    @property
    def enabled(self) -> bool:
        return self._socket is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between WATCHDOG=1 pings: half the watchdog timeout, as systemd advises."""
        if self.watchdog_usec is None or not self.enabled:
            return None
        return self.watchdog_usec / 2_000_000

    def notify(self, **fields: str | int) -> bool:
        """Send one message (`READY=1` is `notify(READY=1)`); False if it was not sent."""
        if self._socket is None or self.address is None:
            return False
        message = "\n".join(f"{key}={value}" for key, value in fields.items())
        try:
            self._socket.sendto(message.encode(), _address(self.address))
        except OSError as exc:
            log.warning("cannot notify systemd at %s: %s", self.address, exc)
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.notify(READY=1, **({"STATUS": status} if status else {}))

    def status(self, text: str) -> bool:
        return self.notify(STATUS=text)

    def watchdog(self) -> bool:
        return self.notify(WATCHDOG=1)

    def stopping(self, status: str | None = None) -> bool:
        return self.notify(STOPPING=1, **({"STATUS": status} if status else {}))

    def reloading(self) -> bool:
        # MONOTONIC_USEC lets systemd (Type=notify-reload, v253+) match the reload
        # to this message; older versions ignore it.
        return self.notify(RELOADING=1, MONOTONIC_USEC=time.monotonic_ns() // 1000)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def _watchdog_usec(environ: MutableMapping[str, str]) -> int | None:
    raw = environ.get("WATCHDOG_USEC")
    if not raw:
        return None
    pid = environ.get("WATCHDOG_PID")
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None  # meant for another process (we were started by the service's main process)
    try:
        usec = int(raw)
    except ValueError:
        return None
    return usec if usec > 0 else None
