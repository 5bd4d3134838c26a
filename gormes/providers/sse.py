"""Server-sent events, line by line: what both streaming providers read.

Several `data:` lines of one event join with newlines; a blank line ends an event.
Comments (":") and `id:`/`retry:` fields carry nothing we use; `event:` names
the event (Anthropic sends it; OpenAI does not).
"""

from __future__ import annotations

from typing import NamedTuple


class Event(NamedTuple):
    name: str  # "message" when the server named none
    data: str


class EventReader:
    """Fed one line at a time; `feed` returns the event a blank line completes."""

    def __init__(self) -> None:
        self._data: list[str] = []
        self._name = ""

    def feed(self, line: str) -> Event | None:
        if not line:
            return self.flush()
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._name = value
        return None

    def flush(self) -> Event | None:
        """The event still open when the stream ends, if any."""
        name, self._name = self._name or "message", ""
        if not self._data:
            return None
        data, self._data = "\n".join(self._data), []
        return Event(name, data)
