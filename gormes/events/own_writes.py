"""What a store's own commits wrote, so that a follower of some event types can
pass over them without reading a page (decision 0050).

A store with one writer (SQLite) knows each of its commits exactly: the positions
it took, from the head it read under the write lock plus one to the last row it
inserted, and the types of the events it inserted (rows of a request undone by
its savepoint may stay counted: more types only means a read more). A follower
whose types are all plain names, none of them among a commit's types, and whose
position is just before that commit, can move past it: those positions are this
store's events, and none of them is of its types.

Right after each own commit the store also reads the log's head, after taking in
the commit's `data_version` (gormes/events/sqlite.py). A commit of anyone else
after that read changes `data_version` and is heard like any other process's,
bumping the generation. So while the generation is still the one that commit's
bump made, nothing lies past that head: a follower there waits instead of reading
a page that would be empty.

A worker's control watch follows seven event types while the worker writes some
two hundred events a commit, of none of them; every commit cost it a thread hop
and a read of the commit's rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from gormes.events.sql_fragments import is_glob


class OwnCommit(NamedTuple):
    first: int  # the first position the commit could take (the head it saw, plus one)
    last: int  # the last position it took
    types: frozenset[str]  # the types of the events it inserted (or more)


def plain_names(types: Iterable[str] | None) -> frozenset[str] | None:
    """`types` as a set of names, if every one is a plain name (no GLOB pattern):
    only then can a follower tell, without SQL, that none matches a commit's."""
    if not types:
        return None
    names = frozenset(types)
    return None if any(is_glob(name) for name in names) else names


class OwnWrites:
    """The store's last `KEEP` commits by first position, and the head right after
    the latest of them with the generation its bump made."""

    KEEP = 64

    def __init__(self) -> None:
        self._by_first: dict[int, OwnCommit] = {}
        self._quiet: tuple[int, int] | None = None  # (generation, head)

    def committed(self, commit: OwnCommit | None, generation: int, head: int | None) -> None:
        """After an own commit's bump to `generation`: what it wrote (None: nothing,
        or the commit failed) and the head read after its `data_version`."""
        if commit is None or head is None:
            self._quiet = None
            return
        self._by_first[commit.first] = commit
        if len(self._by_first) > self.KEEP:
            del self._by_first[next(iter(self._by_first))]
        self._quiet = (generation, head)

    def past(self, position: int, names: frozenset[str]) -> int:
        """`position` moved past every own commit that starts right after it and
        holds none of `names`."""
        while (commit := self._by_first.get(position + 1)) is not None and commit.types.isdisjoint(names):
            position = commit.last
        return position

    def quiet_head(self, generation: int) -> int | None:
        """The head as read after the latest own commit, while `generation` is still
        the one its bump made (nothing past it then); None otherwise."""
        quiet = self._quiet
        return quiet[1] if quiet is not None and quiet[0] == generation else None
