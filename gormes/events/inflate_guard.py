"""The lines of a gzip input, refused once it inflates like a compression bomb.

A JSONL export of events compresses 13-16 times (measured on 11,000 recorded
steps, gzip levels 1 to 9); deflate can reach about 1,000. Two megabytes of gzip
holding two gigabytes of newlines took `gormes replay --file` to 19 GB of memory
before this guard. Past `FLOOR` bytes out, an input that has inflated more than
`MAX_RATIO` times the compressed bytes read so far is refused with one line.

A line is read in pieces of at most `PIECE` bytes, so a line that never ends is
checked as it grows rather than held whole first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

from gormes.errors import UserError

MAX_RATIO = 200
FLOOR = 1 << 20
PIECE = 1 << 20


class InflatesTooMuch(UserError):
    """A gzip input that inflates past MAX_RATIO times its size."""


def guarded_lines(compressed: IO[bytes], inflated: IO[bytes], where: str) -> Iterator[bytes]:
    """The lines of `inflated` (a GzipFile over `compressed`), each ending in a
    newline but perhaps the last."""
    out = 0
    pieces: list[bytes] = []
    while piece := inflated.readline(PIECE):
        out += len(piece)
        if out > FLOOR and out > MAX_RATIO * max(compressed.tell(), 1):
            raise InflatesTooMuch(
                f"{where}: refused: it inflates more than {MAX_RATIO} times its size "
                f"({out / 2**20:.1f} MiB from {compressed.tell() / 2**10:.1f} KiB so far), "
                "which no export of events does (a compression bomb?)"
            )
        if not piece.endswith(b"\n"):
            pieces.append(piece)
            continue
        if pieces:
            pieces.append(piece)
            piece, pieces = b"".join(pieces), []
        yield piece
    if pieces:
        yield b"".join(pieces)
