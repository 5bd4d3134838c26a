"""Our own index of the markdown knowledge: one SQLite file, FTS5 via sqlite-utils.

The index is derived: `refresh` brings it in line with the files (new, changed
and removed files, found by size and mtime), and a missing or damaged index file
is rebuilt from the files. Nothing is ever only in the index. The files are read
through gormes/contained.py, as the fs tools read the workspace: nothing a
symlink points to outside the root is ever read or indexed.

    docs(path TEXT PRIMARY KEY, title, body, size, mtime_ns)   + docs_fts(title, body)
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path, PurePosixPath

import msgspec
import sqlite_utils

from gormes.knowledge import MARKDOWN_SUFFIX, KnowledgeHit, KnowledgeRootUnreadable
from gormes.contained import Entry, Root, open_entry, read_capped, walk_tree
from gormes.ops.spec import InvalidOperationInput, PathOutsideWorkspace

STOPWORDS = frozenset(
    ["a", "an", "and", "are", "about", "as", "at", "be", "by", "did", "do", "does", "for", "from", "how", "in", "is", "it", "of", "on", "or", "our", "that", "the", "this", "to", "was", "we", "were", "what", "when", "where", "which", "who", "why", "with", "you"]
)
SNIPPET_TOKENS = 16
MAX_FILE_BYTES = 8 * 1024 * 1024  # a larger markdown file is skipped (and listed as such)


class RefreshReport(msgspec.Struct, frozen=True, kw_only=True):
    indexed: int  # files (re)read this time
    removed: int
    total: int
    skipped: list[str]  # files that could not be read (relative paths)
    rebuilt: bool = False  # the index file was missing or damaged


class MarkdownFile(msgspec.Struct, frozen=True, kw_only=True):
    """One markdown file as read just now: its path relative to the root (a
    symlink's own name when it is one), its size, mtime and text."""

    path: str
    size: int
    mtime_ns: int
    text: str

    @property
    def stem(self) -> str:
        return PurePosixPath(self.path).stem


def open_knowledge_root(root: Path) -> Root:
    """The root opened for contained walks, or KnowledgeRootUnreadable."""
    if not root.exists():
        raise KnowledgeRootUnreadable(f"{root}: knowledge root not found")
    if not root.is_dir():
        raise KnowledgeRootUnreadable(f"{root}: knowledge root is not a directory")
    try:
        contained = Root(root, label="knowledge root")
    except OSError as exc:
        raise KnowledgeRootUnreadable(f"{root}: knowledge root cannot be read: {exc.strerror or exc}") from None
    try:
        os.listdir(contained.fd)
    except OSError as exc:
        contained.close()
        raise KnowledgeRootUnreadable(f"{root}: knowledge root cannot be read: {exc.strerror or exc}") from None
    return contained


def check_root(root: Path) -> None:
    """KnowledgeRootUnreadable unless the root can be opened and listed."""
    open_knowledge_root(root).close()


def markdown_files(root: Path) -> tuple[list[MarkdownFile], list[str]]:
    """Every `*.md` under root, skipping hidden directories below it, read
    through gormes/contained.py: a symlink is read only when it leads to a
    regular file inside the root (and not into a hidden directory); one pointing
    out is never read. Also the files that could not be read (relative paths)."""
    found: list[MarkdownFile] = []
    skipped: list[str] = []
    with open_knowledge_root(root) as contained:
        for parts, dir_fd, entries in walk_tree(contained.fd, enter=lambda name: not name.startswith(".")):
            for entry in entries:
                if not entry.name.endswith(MARKDOWN_SUFFIX) or entry.kind not in ("file", "symlink"):
                    continue
                relative = "/".join((*parts, entry.name))
                read = _read_markdown(contained, dir_fd, entry, relative)
                if isinstance(read, MarkdownFile):
                    found.append(read)
                elif read == "unreadable":
                    skipped.append(relative)
    return sorted(found, key=lambda f: f.path), sorted(skipped)


def _read_markdown(contained: Root, dir_fd: int, entry: Entry, relative: str) -> MarkdownFile | str:
    """The file, or why not: "unreadable" (too large, not UTF-8, an I/O error)
    or "ignored" (a link out, dangling or looping, or not to a regular file)."""
    if entry.kind == "symlink":
        try:
            fd, where = contained.open_file(relative)
        except (InvalidOperationInput, PathOutsideWorkspace):
            return "ignored"
        where.close()
        if any(part.startswith(".") for part in where.parts[:-1]):
            os.close(fd)
            return "ignored"
    else:
        fd = open_entry(dir_fd, entry)
        if fd is None:
            return "ignored"
    try:
        info = os.fstat(fd)
        data = read_capped(fd, MAX_FILE_BYTES)
        if data is None:
            return "unreadable"
        return MarkdownFile(path=relative, size=info.st_size, mtime_ns=info.st_mtime_ns, text=data.decode("utf-8"))
    except (OSError, UnicodeDecodeError):
        return "unreadable"
    finally:
        os.close(fd)


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

    def refresh(self, files: tuple[list[MarkdownFile], list[str]] | None = None) -> RefreshReport:
        """Bring the index in line with the files (`files`: as `markdown_files`
        just read them, else read now)."""
        found, skipped = files if files is not None else markdown_files(self.root)
        db, rebuilt = self._open()
        try:
            known = {row["path"]: (row["size"], row["mtime_ns"]) for row in db["docs"].rows_where(select="path, size, mtime_ns")}
            seen = {f.path for f in found}
            changed = [
                {"path": f.path, "title": title_of(f.text, f.stem), "body": f.text,
                 "size": f.size, "mtime_ns": f.mtime_ns}
                for f in found if known.get(f.path) != (f.size, f.mtime_ns)
            ]
            gone = sorted(set(known) - seen)
            with db.conn:
                if changed:
                    db["docs"].upsert_all(changed, pk="path")
                for relative in gone:
                    db["docs"].delete(relative)
            return RefreshReport(indexed=len(changed), removed=len(gone), total=len(seen),
                                 skipped=list(skipped), rebuilt=rebuilt)
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
            KnowledgeHit(path=path, title=title, snippet=" ".join(snippet.split()), score=float(f"{-rank:.4g}"), source="fts")
            for path, title, snippet, rank in rows
        ]


def grep(files: list[MarkdownFile], needles: list[str], limit: int) -> list[KnowledgeHit]:
    """Lines holding one of `needles` exactly (case-insensitive), first match per file."""
    lowered = [n.lower() for n in needles if n.strip()]
    hits: list[KnowledgeHit] = []
    for file in files:
        for number, line in enumerate(file.text.splitlines(), 1):
            if any(n in line.lower() for n in lowered):
                hits.append(KnowledgeHit(
                    path=file.path, title=title_of(file.text, file.stem),
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
