"""Text that is safe to show a person on a terminal.

Strings that come from outside (a gateway's job name, a fact, a stream name)
may hold control characters: ESC starts sequences that set the window title
(OSC 0), write the clipboard (OSC 52) or redraw the screen (CSI); a newline
forges a table row; U+202E turns `gpj.exe` into `exe.jpg`. `printable` shows
each such character as a visible escape (`\\x1b`, `\\n`, `\\u202e`) instead.
JSON output needs none of this: its encoder escapes C0 already, and the escape
chosen for the rest is JSON's own.

    printable("job\\x1b]0;pwned\\x07")  ->  'job\\\\x1b]0;pwned\\\\x07'

`guard_standard_streams` puts the filter in front of sys.stdout and sys.stderr,
for every line the CLI prints that no printer escaped value by value.
"""

from __future__ import annotations

import io
import re
import sys
from typing import Any, TextIO

_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
# Bidi embeddings, overrides and isolates, and the implicit marks: they reorder what is shown.
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
CONTROL_CODES = (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), *_BIDI)


def _escape(code: int) -> str:
    """C0 as `\\x1b` (JSON never holds one raw); DEL, C1 and bidi as `\\u009b`,
    which inside a JSON string is a valid escape of the very same character, so a
    JSON line that passes the filter still decodes to what it said."""
    char = chr(code)
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{code:02x}" if code < 0x20 else f"\\u{code:04x}"


_TABLE = {code: _escape(code) for code in CONTROL_CODES}
# Layout a whole line of output may carry (a printer's own newlines); a value never may.
_LAYOUT_TABLE = {code: text for code, text in _TABLE.items() if chr(code) not in "\n\t"}
_TERMINAL_TABLE = {code: text for code, text in _LAYOUT_TABLE.items() if chr(code) != "\r"}
# A complete CSI sequence (ESC [ parameters intermediates final): what rich itself
# writes to a terminal for colour, cursor and screen; OSC, DCS and the rest are never let by.
CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def printable(text: str) -> str:
    """`text` with every control character shown as an escape: for one value."""
    return text.translate(_TABLE)


def printable_lines(text: str) -> str:
    """Like `printable`, but keeping newlines and tabs: for whole lines a printer made."""
    return text.translate(_LAYOUT_TABLE)


def printable_terminal(text: str) -> str:
    """What rich writes: CSI sequences (and carriage returns) kept, all else escaped."""
    out = []
    last = 0
    for match in CSI.finditer(text):
        out.append(text[last:match.start()].translate(_TERMINAL_TABLE))
        out.append(match.group())
        last = match.end()
    out.append(text[last:].translate(_TERMINAL_TABLE))
    return "".join(out)


class GuardedStream(io.TextIOBase):
    """A text stream that shows control characters as escapes before they reach
    `stream` (see `gormes.printable`); its `buffer` is the raw one, for JSON.

    A printer's own newlines and tabs pass. rich finds its console file through
    `rich_proxied_file`, which keeps the CSI sequences rich styles with when the
    stream is a terminal (rich writes none otherwise) and escapes everything else."""

    def __init__(self, stream: TextIO, *, terminal: bool = False) -> None:
        self._stream = stream
        self._filter = printable_terminal if terminal else printable_lines
        self._for_rich = self if terminal else None

    @property
    def rich_proxied_file(self) -> GuardedStream:
        if self._for_rich is None:
            self._for_rich = GuardedStream(self._stream, terminal=self._stream.isatty())
        return self._for_rich

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._stream.write(self._filter(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def buffer(self) -> Any:
        return self._stream.buffer

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self._stream.errors


def guard_standard_streams() -> None:
    """Route sys.stdout and sys.stderr through `GuardedStream` (once)."""
    if not isinstance(sys.stdout, GuardedStream) and sys.stdout is not None:
        sys.stdout = GuardedStream(sys.stdout)
    if not isinstance(sys.stderr, GuardedStream) and sys.stderr is not None:
        sys.stderr = GuardedStream(sys.stderr)
