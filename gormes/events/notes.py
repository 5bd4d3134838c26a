"""Notes: free-text annotations that people and actors add to any stream.

An operator marks an incident on a job's stream; an actor records what it saw.
The demo's actors write these.
"""

from __future__ import annotations

from gormes.events.base import Event


class NoteAdded(Event, tag="note.added"):
    text: str
    author: str = ""
    tags: tuple[str, ...] = ()
