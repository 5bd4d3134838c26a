"""Knowledge routing: "what did we decide about X?" over a project's markdown.

The markdown files under the knowledge root (default `.writ/`) are canonical;
every index over them (a GBrain brain, our own FTS5 file) is derived and may be
deleted at any time.

    brain    is a GBrain brain healthy here? (`gbrain doctor --json`), and its
             search and sync, each under a timeout
    index    our own FTS5 index of the markdown files (sqlite-utils), refreshed
             from the files on every use
    search   route a query: to the brain when it is healthy and answers with
             something traceable, else to our index and an exact-string grep
    write    markdown first, then re-index (`gbrain sync` when a brain is present)

See docs/knowledge.md.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import msgspec

from gormes.errors import UserError
from gormes.events.sqlite_schema import default_db_path
from gormes.ops.spec import InvalidOperationInput

ROOT_ENV = "GORMES_KNOWLEDGE_ROOT"
INDEX_ENV = "GORMES_KNOWLEDGE_INDEX"
DEFAULT_ROOT = ".writ"
MARKDOWN_SUFFIX = ".md"


class KnowledgeError(UserError):
    """Bad knowledge input: one clear line, non-zero exit."""


class InvalidQuery(KnowledgeError, InvalidOperationInput):
    """A query that cannot be searched for (invalid input to the operation)."""


class EmptyQuery(InvalidQuery):
    """A query with nothing to search for."""


class KnowledgeRootUnreadable(KnowledgeError):
    """The markdown root is missing, not a directory, or cannot be listed."""


class InvalidKnowledgePath(KnowledgeError, InvalidOperationInput):
    """A path to write that is not a markdown file inside the root (invalid input)."""


class KnowledgeHit(msgspec.Struct, frozen=True, kw_only=True):
    """One answer. `path` is the canonical markdown file, relative to the root;
    `trusted` is False when the hit could not be traced to such a file (then
    `path` is whatever the source named, kept so a person can look)."""

    path: str
    title: str
    snippet: str
    score: float
    source: str  # "gbrain", "fts" or "grep"
    trusted: bool = True
    line: int | None = None  # the matching line, for grep hits


def knowledge_root(explicit: str | Path | None = None, workspace: Path | None = None) -> Path:
    """The explicit root, else $GORMES_KNOWLEDGE_ROOT, else `.writ/` in the
    workspace (or the working directory)."""
    if explicit:
        return Path(explicit)
    from_env = os.environ.get(ROOT_ENV)
    if from_env:
        return Path(from_env)
    return (workspace or Path(".")) / DEFAULT_ROOT


def default_index_path(root: Path) -> Path:
    """$GORMES_KNOWLEDGE_INDEX, else one file per root in the gormes data dir
    (next to the default database): the root itself stays pure markdown."""
    from_env = os.environ.get(INDEX_ENV)
    if from_env:
        return Path(from_env)

    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return default_db_path().parent / "knowledge" / f"{key}.db"


def check_query(query: str) -> str:
    text = query.strip()
    if not text:
        raise EmptyQuery("the query is empty: say what to search for")
    if "\0" in text:
        raise InvalidQuery("the query contains a NUL byte")
    if not is_unicode(text):
        raise InvalidQuery("the query is not valid Unicode text")
    return text


def is_unicode(text: str) -> bool:
    """False for a str holding lone surrogates (JSON allows them; UTF-8 does not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
