"""Logs on stderr that read well in a terminal and in the journal.

Under systemd (JOURNAL_STREAM names the device and inode of our stderr) each line
starts with its syslog priority in angle brackets, `<3>` error ... `<7>` debug,
which journald turns into the entry's priority, and carries no timestamp: the
journal stamps every entry itself. Elsewhere lines start with a UTC timestamp
and the level name. Multi-line messages (tracebacks) get the prefix on every line,
since journald makes each line an entry of its own.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import TextIO

# syslog priorities (RFC 5424): what journald reads from a "<N>" line prefix
PRIORITIES = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


def syslog_priority(levelno: int) -> int:
    for level in sorted(PRIORITIES, reverse=True):
        if levelno >= level:
            return PRIORITIES[level]
    return 7


def under_journald(stream: TextIO = sys.stderr, environ: Mapping[str, str] = os.environ) -> bool:
    """True when `stream` is the journal stream systemd gave us (not just inherited)."""
    raw = environ.get("JOURNAL_STREAM", "")
    device, _, inode = raw.partition(":")
    if not (device.isdigit() and inode.isdigit()):
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (st.st_dev, st.st_ino) == (int(device), int(inode))


class JournalFormatter(logging.Formatter):
    """`<6>gormes.daemon: message`, the prefix repeated on every line."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{syslog_priority(record.levelno)}>"
        text = f"{record.name}: {super().format(record)}"
        return "\n".join(prefix + line for line in text.splitlines() or [""])


class PlainFormatter(logging.Formatter):
    """`2024-03-01T10:00:00.123Z INFO gormes.daemon: message`."""

    converter = time.gmtime

    def __init__(self) -> None:
        super().__init__("%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s: %(message)s",
                         datefmt="%Y-%m-%dT%H:%M:%S")


def setup_logging(
    level: int = logging.INFO, *, journal: bool | None = None, stream: TextIO | None = None
) -> logging.Handler:
    """Send the `gormes` loggers to stderr (or `stream`) in the right form; idempotent."""
    stream = stream or sys.stderr
    if journal is None:
        journal = under_journald(stream)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JournalFormatter() if journal else PlainFormatter())
    handler.set_name("gormes")
    root = logging.getLogger("gormes")
    for old in [h for h in root.handlers if h.get_name() == "gormes"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
    return handler
