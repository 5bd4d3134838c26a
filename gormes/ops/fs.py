"""Read-only file tools inside the workspace root: fs.read, fs.list, fs.grep.

Every path is resolved (symlinks followed) and must land inside the resolved
root, or the call is refused with `PathOutsideWorkspace`: `..`, an absolute path
elsewhere and a symlink pointing out are all caught by the same check. Paths in
outputs are relative to the root. Reads, listings and matches are capped; a capped
answer says so (`truncated`). The blocking work runs in a worker thread.
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path
from typing import Annotated, Literal

import msgspec
import trio

from gormes.ops.spec import (
    InvalidOperationInput, OperationContext, OperationSpec, OperationUnavailable,
    PathOutsideWorkspace,
)

READ_DEFAULT_BYTES = 64 * 1024
READ_MAX_BYTES = 1024 * 1024
LIST_MAX_ENTRIES = 5000
GREP_MAX_MATCHES = 1000
GREP_MAX_FILE_BYTES = 2 * 1024 * 1024
GREP_LINE_CHARS = 400
BINARY_SNIFF_BYTES = 8192

RelPath = Annotated[str, msgspec.Meta(description="A path relative to the workspace root.")]


# -- paths ----------------------------------------------------------------------


def workspace_root(ctx: OperationContext) -> Path:
    if ctx.workspace is None:
        raise OperationUnavailable("no workspace is configured: the fs operations are off")
    try:
        return ctx.workspace.resolve(strict=True)
    except OSError as exc:
        raise OperationUnavailable(f"the workspace {str(ctx.workspace)!r} is not readable: {exc}") from None


def resolve_inside(root: Path, path: str) -> Path:
    """`path` (relative to `root`, or absolute) resolved with symlinks followed;
    refused unless it exists and lies inside `root` (already resolved)."""
    if "\0" in path:
        raise InvalidOperationInput(f"path {path!r} contains a NUL byte")
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = root / candidate
    try:
        resolved = candidate.resolve(strict=True)
    except FileNotFoundError:
        # Say "outside" rather than "missing" for a path that would escape anyway,
        # so nothing is learned about what exists outside the root.
        _refuse_if_outside(root, candidate.resolve(strict=False), path)
        raise InvalidOperationInput(f"no such file or directory: {path!r}") from None
    except (OSError, RuntimeError) as exc:  # symlink loops, permission
        raise InvalidOperationInput(f"cannot resolve {path!r}: {exc}") from None
    _refuse_if_outside(root, resolved, path)
    return resolved


def _refuse_if_outside(root: Path, resolved: Path, given: str) -> None:
    if not resolved.is_relative_to(root):
        raise PathOutsideWorkspace(f"path {given!r} is outside the workspace")


def _relative(root: Path, path: Path) -> str:
    rel = path.relative_to(root).as_posix()
    return rel or "."


# -- fs.read --------------------------------------------------------------------


class FsReadInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Read a text file in the workspace."""

    path: RelPath
    offset: Annotated[int, msgspec.Meta(ge=0, description="Byte offset to start at.")] = 0
    max_bytes: Annotated[int, msgspec.Meta(ge=1, le=READ_MAX_BYTES)] = READ_DEFAULT_BYTES


class FsReadOutput(msgspec.Struct, kw_only=True):
    path: str
    content: str  # decoded as UTF-8, undecodable bytes replaced
    size: int  # the whole file's size in bytes
    offset: int
    bytes_read: int
    truncated: bool  # more of the file lies after what was read


def _read(root: Path, value: FsReadInput) -> FsReadOutput:
    path = resolve_inside(root, value.path)
    if not path.is_file():
        raise InvalidOperationInput(f"not a file: {value.path!r}")
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(value.offset)
        data = f.read(value.max_bytes)
    return FsReadOutput(
        path=_relative(root, path), content=data.decode("utf-8", "replace"), size=size,
        offset=value.offset, bytes_read=len(data), truncated=value.offset + len(data) < size,
    )


async def fs_read(ctx: OperationContext, value: FsReadInput) -> FsReadOutput:
    root = workspace_root(ctx)
    return await trio.to_thread.run_sync(_read, root, value, abandon_on_cancel=True)


# -- fs.list --------------------------------------------------------------------


class FsListInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """List a directory in the workspace (symlinks are listed, never followed)."""

    path: RelPath = "."
    recursive: bool = False
    max_entries: Annotated[int, msgspec.Meta(ge=1, le=LIST_MAX_ENTRIES)] = 500


class FsEntry(msgspec.Struct, kw_only=True):
    path: str
    kind: Literal["file", "dir", "symlink", "other"]
    size: int | None = None  # files only


class FsListOutput(msgspec.Struct, kw_only=True):
    path: str
    entries: list[FsEntry]
    truncated: bool


def _entry(root: Path, entry: os.DirEntry[str]) -> FsEntry:
    rel = _relative(root, Path(entry.path))
    if entry.is_symlink():
        return FsEntry(path=rel, kind="symlink")
    if entry.is_dir(follow_symlinks=False):
        return FsEntry(path=rel, kind="dir")
    if entry.is_file(follow_symlinks=False):
        return FsEntry(path=rel, kind="file", size=entry.stat(follow_symlinks=False).st_size)
    return FsEntry(path=rel, kind="other")


def _list(root: Path, value: FsListInput) -> FsListOutput:
    top = resolve_inside(root, value.path)
    if not top.is_dir():
        raise InvalidOperationInput(f"not a directory: {value.path!r}")
    entries: list[FsEntry] = []
    pending = [top]
    while pending:
        directory = pending.pop(0)
        with os.scandir(directory) as it:
            children = sorted(it, key=lambda e: e.name)
        for child in children:
            if len(entries) >= value.max_entries:
                return FsListOutput(path=_relative(root, top), entries=entries, truncated=True)
            entry = _entry(root, child)
            entries.append(entry)
            if value.recursive and entry.kind == "dir":
                pending.append(Path(child.path))
    return FsListOutput(path=_relative(root, top), entries=entries, truncated=False)


async def fs_list(ctx: OperationContext, value: FsListInput) -> FsListOutput:
    root = workspace_root(ctx)
    return await trio.to_thread.run_sync(_list, root, value, abandon_on_cancel=True)


# -- fs.grep --------------------------------------------------------------------


class FsGrepInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Search text files in the workspace for a regular expression (Python syntax)."""

    pattern: Annotated[str, msgspec.Meta(min_length=1)]
    path: RelPath = "."
    glob: Annotated[str, msgspec.Meta(description="Only files whose name matches, like *.md.")] | None = None
    ignore_case: bool = False
    max_matches: Annotated[int, msgspec.Meta(ge=1, le=GREP_MAX_MATCHES)] = 100


class GrepMatch(msgspec.Struct, kw_only=True):
    path: str
    line: int  # 1-based
    text: str  # the line, cut at GREP_LINE_CHARS characters


class FsGrepOutput(msgspec.Struct, kw_only=True):
    matches: list[GrepMatch]
    files_searched: int
    truncated: bool  # stopped at max_matches


def _candidate_files(root: Path, top: Path, glob: str | None):
    if top.is_file():
        yield top
        return
    for directory, dirs, files in os.walk(top, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            if glob is not None and not fnmatch.fnmatch(name, glob):
                continue
            path = Path(directory, name)
            try:
                resolved = path.resolve(strict=True)
            except (OSError, RuntimeError):
                continue
            # A symlinked file is searched only if it points inside the root.
            if resolved.is_relative_to(root) and resolved.is_file():
                yield path


def _grep(root: Path, value: FsGrepInput) -> FsGrepOutput:
    try:
        regex = re.compile(value.pattern, re.IGNORECASE if value.ignore_case else 0)
    except re.error as exc:
        raise InvalidOperationInput(f"invalid pattern {value.pattern!r}: {exc}") from None
    top = resolve_inside(root, value.path)
    matches: list[GrepMatch] = []
    searched = 0
    for path in _candidate_files(root, top, value.glob):
        try:
            if path.stat().st_size > GREP_MAX_FILE_BYTES:
                continue
            data = path.read_bytes()
        except OSError:
            continue
        if b"\0" in data[:BINARY_SNIFF_BYTES]:
            continue
        searched += 1
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if regex.search(line):
                if len(matches) >= value.max_matches:
                    return FsGrepOutput(matches=matches, files_searched=searched, truncated=True)
                matches.append(GrepMatch(
                    path=_relative(root, path), line=number, text=line[:GREP_LINE_CHARS],
                ))
    return FsGrepOutput(matches=matches, files_searched=searched, truncated=False)


async def fs_grep(ctx: OperationContext, value: FsGrepInput) -> FsGrepOutput:
    root = workspace_root(ctx)
    return await trio.to_thread.run_sync(_grep, root, value, abandon_on_cancel=True)


# -- specs ----------------------------------------------------------------------

_READERS = frozenset({"operator", "gateway", "child-agent", "system"})

SPECS = (
    OperationSpec(
        name="fs.read", description="Read a text file inside the workspace (read-only, capped).",
        input_type=FsReadInput, output_type=FsReadOutput, handler=fs_read, trust=_READERS,
        audit_kind="fs.read", prompt_visible=True, timeout=10.0, doctor_checks=("workspace",),
    ),
    OperationSpec(
        name="fs.list", description="List the files and directories of a workspace directory.",
        input_type=FsListInput, output_type=FsListOutput, handler=fs_list, trust=_READERS,
        audit_kind="fs.read", prompt_visible=True, timeout=10.0, doctor_checks=("workspace",),
    ),
    OperationSpec(
        name="fs.grep", description="Search the workspace's text files for a regular expression.",
        input_type=FsGrepInput, output_type=FsGrepOutput, handler=fs_grep, trust=_READERS,
        audit_kind="fs.read", prompt_visible=True, timeout=30.0, doctor_checks=("workspace",),
    ),
)
