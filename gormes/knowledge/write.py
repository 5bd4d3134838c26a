"""Write knowledge: the markdown file first (atomically), then the indexes.

The file is the record; re-indexing only follows it. When a brain is present,
`gbrain sync --repo ROOT` brings it up to date; our own index is refreshed in
any case so the fallback never serves stale text. A failing re-index is reported
in the result and loses nothing: the file is already on disk.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path, PurePosixPath

import msgspec
import trio

from gormes.knowledge import (
    MARKDOWN_SUFFIX,
    InvalidKnowledgePath,
    KnowledgeRootUnreadable,
    default_index_path,
)
from gormes.knowledge import brain as gbrain
from gormes.knowledge.brain import BrainConfig, BrainHealth
from gormes.knowledge.index import KnowledgeIndex


class WriteResult(msgspec.Struct, frozen=True, kw_only=True):
    path: str  # relative to the root: the canonical file
    bytes: int
    created: bool
    brain: BrainHealth
    reindexed: list[str]  # "gbrain", "fts": what was brought up to date
    problems: list[str] = []  # re-indexing that failed (the file is written regardless)


def target_path(root: Path, relative: str) -> Path:
    """`relative` as a markdown file inside root, or InvalidKnowledgePath."""
    pure = PurePosixPath(relative.replace("\\", "/"))
    if not relative.strip() or pure.is_absolute() or ".." in pure.parts:
        raise InvalidKnowledgePath(f"{relative!r}: give a path inside the knowledge root, like decisions/db.md")
    if pure.suffix != MARKDOWN_SUFFIX:
        raise InvalidKnowledgePath(f"{relative!r}: knowledge files are markdown ({MARKDOWN_SUFFIX})")
    if any(part.startswith(".") for part in pure.parts):
        raise InvalidKnowledgePath(f"{relative!r}: hidden files and directories are not indexed")
    return root / Path(*pure.parts)


def write_markdown(root: Path, relative: str, text: str, append: bool) -> tuple[Path, int, bool]:
    """Write (or append to) the file atomically and durably; returns (path, bytes, created)."""
    path = target_path(root, relative)
    if root.exists() and not root.is_dir():
        raise KnowledgeRootUnreadable(f"{root}: knowledge root is not a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        created = not path.exists()
        before = "" if created or not append else path.read_text(encoding="utf-8")
        if before and not before.endswith("\n"):
            before += "\n"
        content = before + text + ("" if text.endswith("\n") else "\n")
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(content)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise KnowledgeRootUnreadable(f"{path}: cannot be written: {exc.strerror or exc}") from None
    return path, len(content.encode("utf-8")), created


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
    return WriteResult(path=path.relative_to(root).as_posix(), bytes=size, created=created,
                       brain=health, reindexed=reindexed, problems=problems)
