"""Our own index of the markdown knowledge: one SQLite file, FTS5 via sqlite-utils.

The index is derived: `refresh` brings it in line with the files (new, changed
and removed files, found by size and mtime), and a missing or damaged index file
is rebuilt from the files. Nothing is ever only in the index.

    docs(path TEXT PRIMARY KEY, title, body, size, mtime_ns)   + docs_fts(title, body)
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import msgspec
import sqlite_utils

from gormes.knowledge import MARKDOWN_SUFFIX, KnowledgeHit, KnowledgeRootUnreadable

STOPWORDS = frozenset(
    ["a", "an", "and", "are", "about", "as", "at", "be", "by", "did", "do", "does", "for", "from", "how", "in", "is", "it", "of", "on", "or", "our", "that", "the", "this", "to", "was", "we", "were", "what", "when", "where", "which", "who", "why", "with", "you"]
)
SNIPPET_TOKENS = 16


class RefreshReport(msgspec.Struct, frozen=True, kw_only=True):
    indexed: int  # files (re)read this time
    removed: int
    total: int
    skipped: list[str]  # files that could not be read (relative paths)
    rebuilt: bool = False  # the index file was missing or damaged


def markdown_files(root: Path) -> list[Path]:
    """Every `*.md` under root, skipping hidden directories below it."""
    if not root.exists():
        raise KnowledgeRootUnreadable(f"{root}: knowledge root not found")
    if not root.is_dir():
        raise KnowledgeRootUnreadable(f"{root}: knowledge root is not a directory")
    try:
        next(root.iterdir(), None)
    except OSError as exc:
        raise KnowledgeRootUnreadable(f"{root}: knowledge root cannot be read: {exc.strerror or exc}") from None
    found = []
    for path in root.rglob(f"*{MARKDOWN_SUFFIX}"):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts[:-1]):
            continue
        if path.is_file():
            found.append(path)
    return sorted(found)


def title_of(text: str, fallback: str) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return fallback


def fts_query(query: str) -> str | None:
    """An FTS5 MATCH expression: the query's words (stopwords dropped unless
    nothing else is left), each quoted, OR-ed; bm25 ranks by how many match."""
    words = [w.lower() for w in re.findall(r"\w+", query)]
    kept = [w for w in words if w not in STOPWORDS] or words
    unique = list(dict.fromkeys(kept))
    return " OR ".join(f'"{w}"' for w in unique) or None


class KnowledgeIndex:
    def __init__(self, root: Path, index_path: Path) -> None:
        self.root = root
        self.path = index_path

    def _open(self) -> tuple[sqlite_utils.Database, bool]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        rebuilt = not self.path.exists()
        try:
            db = sqlite_utils.Database(self.path)
            db.execute("PRAGMA quick_check").fetchall()
        except sqlite3.DatabaseError:
            self.path.unlink(missing_ok=True)
            db = sqlite_utils.Database(self.path)
            rebuilt = True
        if "docs" not in db.table_names():
            db["docs"].create({"path": str, "title": str, "body": str, "size": int, "mtime_ns": int}, pk="path")
            db["docs"].enable_fts(["title", "body"], create_triggers=True, tokenize="porter")
            rebuilt = True
        return db, rebuilt

    def refresh(self) -> RefreshReport:
        files = markdown_files(self.root)
        db, rebuilt = self._open()
        try:
            known = {row["path"]: (row["size"], row["mtime_ns"]) for row in db["docs"].rows_where(select="path, size, mtime_ns")}
            seen: set[str] = set()
            skipped: list[str] = []
            changed = []
            for path in files:
                relative = path.relative_to(self.root).as_posix()
                try:
                    stat = path.stat()
                    seen.add(relative)
                    if known.get(relative) == (stat.st_size, stat.st_mtime_ns):
                        continue
                    text = path.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    skipped.append(relative)
                    seen.discard(relative)
                    continue
                changed.append({"path": relative, "title": title_of(text, path.stem), "body": text,
                                "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
            gone = sorted(set(known) - seen)
            with db.conn:
                if changed:
                    db["docs"].upsert_all(changed, pk="path")
                for relative in gone:
                    db["docs"].delete(relative)
            return RefreshReport(indexed=len(changed), removed=len(gone), total=len(seen),
                                 skipped=skipped, rebuilt=rebuilt)
        finally:
            db.close()

    def search(self, query: str, limit: int) -> list[KnowledgeHit]:
        match = fts_query(query)
        if match is None:
            return []
        db, _ = self._open()
        try:
            rows = db.execute(
                "SELECT docs.path, docs.title, snippet(docs_fts, 1, '', '', '…', ?), bm25(docs_fts) "
                "FROM docs_fts JOIN docs ON docs.rowid = docs_fts.rowid "
                "WHERE docs_fts MATCH ? ORDER BY bm25(docs_fts), docs.path LIMIT ?",
                (SNIPPET_TOKENS, match, limit),
            ).fetchall()
        finally:
            db.close()
        return [
            KnowledgeHit(path=path, title=title, snippet=" ".join(snippet.split()), score=round(-rank, 4), source="fts")
            for path, title, snippet, rank in rows
        ]


def grep(root: Path, files: list[Path], needles: list[str], limit: int) -> list[KnowledgeHit]:
    """Lines holding one of `needles` exactly (case-insensitive), first match per file."""
    lowered = [n.lower() for n in needles if n.strip()]
    hits: list[KnowledgeHit] = []
    for path in files:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for number, line in enumerate(lines, 1):
            if any(n in line.lower() for n in lowered):
                hits.append(KnowledgeHit(
                    path=path.relative_to(root).as_posix(), title=title_of("\n".join(lines), path.stem),
                    snippet=line.strip()[:400], score=1.0, source="grep", line=number,
                ))
                break
        if len(hits) >= limit:
            break
    return hits


def exact_strings(query: str) -> list[str]:
    """What to grep for: the quoted parts of the query, else the whole query."""
    quoted = [part for pair in re.findall(r'"([^"]+)"|`([^`]+)`', query) for part in pair if part]
    return quoted or [query.strip()]
