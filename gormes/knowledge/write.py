"""Write knowledge: the markdown file first (atomically), then the indexes.

The file is the record; re-indexing only follows it. When a brain is present,
`gbrain sync --repo ROOT` brings it up to date; our own index is refreshed in
any case so the fallback never serves stale text. A failing re-index is reported
in the result and loses nothing: the file is already on disk.
"""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path, PurePosixPath

import msgspec
import trio

from gormes.knowledge import (
    MARKDOWN_SUFFIX,
    InvalidKnowledgePath,
    KnowledgeRootUnreadable,
    default_index_path,
    is_unicode,
)
from gormes.knowledge import brain as gbrain
from gormes.knowledge.brain import BrainConfig, BrainHealth
from gormes.knowledge.index import MAX_FILE_BYTES, KnowledgeIndex
from gormes.contained import Root, replace_file


class WriteResult(msgspec.Struct, frozen=True, kw_only=True):
    path: str  # relative to the root: the canonical file
    bytes: int
    created: bool
    brain: BrainHealth
    reindexed: list[str]  # "gbrain", "fts": what was brought up to date
    problems: list[str] = []  # re-indexing that failed (the file is written regardless)


def check_relative(relative: str) -> PurePosixPath:
    """`relative` as a markdown path inside the root, or InvalidKnowledgePath."""
    if "\0" in relative:
        raise InvalidKnowledgePath(f"{relative!r}: a path may not contain a NUL byte")
    pure = PurePosixPath(relative.replace("\\", "/"))
    if not relative.strip() or pure.is_absolute() or ".." in pure.parts:
        raise InvalidKnowledgePath(f"{relative!r}: give a path inside the knowledge root, like decisions/db.md")
    if pure.suffix != MARKDOWN_SUFFIX:
        raise InvalidKnowledgePath(f"{relative!r}: knowledge files are markdown ({MARKDOWN_SUFFIX})")
    if any(part.startswith(".") for part in pure.parts):
        raise InvalidKnowledgePath(f"{relative!r}: hidden files and directories are not indexed")
    return pure


def write_markdown(root: Path, relative: str, text: str, append: bool) -> tuple[str, int, bool]:
    """Write (or append to) the file atomically and durably, through
    gormes/contained.py: a symlink on the way is followed only while it stays
    inside the root (one pointing out is refused, never written through or read),
    and the name is replaced, never written into. Returns (the file's real path
    relative to the root, bytes, created)."""
    pure = check_relative(relative)
    if not is_unicode(text):
        raise InvalidKnowledgePath(f"{relative!r}: the text is not valid Unicode (lone surrogates)")
    if root.exists() and not root.is_dir():
        raise KnowledgeRootUnreadable(f"{root}: knowledge root is not a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
        with Root(root, label="knowledge root") as contained:
            with contained.locate(pure.as_posix(), missing_ok=True, make_dirs=True) as where:
                real = PurePosixPath(*where.parts) if where.parts else PurePosixPath(".")
                if real.suffix != MARKDOWN_SUFFIX or any(part.startswith(".") for part in where.parts):
                    raise InvalidKnowledgePath(f"{relative!r}: leads to {real.as_posix()!r}, not a markdown file the index reads")
                created = where.info is None
                if not created and not stat.S_ISREG(where.info.st_mode):
                    raise InvalidKnowledgePath(f"{relative!r}: not a regular file")
                before = ""
                if append and not created:
                    data, _ = contained.read_file(real.as_posix(), MAX_FILE_BYTES)
                    if data is None:
                        raise InvalidKnowledgePath(f"{relative!r}: too large to append to")
                    before = data.decode("utf-8")
                if before and not before.endswith("\n"):
                    before += "\n"
                content = (before + text + ("" if text.endswith("\n") else "\n")).encode("utf-8")
                replace_file(where.dir_fd, where.name, content)
    except UnicodeDecodeError:
        raise InvalidKnowledgePath(f"{relative!r}: the file there is not UTF-8 text") from None
    except OSError as exc:
        raise KnowledgeRootUnreadable(f"{root / relative}: cannot be written: {exc.strerror or exc}") from None
    return real.as_posix(), len(content), created


async def write_knowledge(
    relative: str,
    text: str,
    *,
    root: Path,
    append: bool = False,
    brain: BrainConfig | None = None,
    index_path: Path | None = None,
) -> WriteResult:
    config = brain or BrainConfig()
    path, size, created = await trio.to_thread.run_sync(write_markdown, root, relative, text, append)
    reindexed: list[str] = []
    problems: list[str] = []
    health = await gbrain.detect(config)
    if health.present:
        synced = await gbrain.sync(config, root)
        if synced.outcome == "ok":
            reindexed.append("gbrain")
        else:
            problems.append(f"gbrain sync: {synced.outcome}" + (f" ({synced.detail})" if synced.detail else ""))
    index = KnowledgeIndex(root, index_path or default_index_path(root))
    try:
        await trio.to_thread.run_sync(index.refresh)
        reindexed.append("fts")
    except (OSError, sqlite3.Error) as exc:
        problems.append(f"local index: {exc}")
    return WriteResult(path=path, bytes=size, created=created,
                       brain=health, reindexed=reindexed, problems=problems)
