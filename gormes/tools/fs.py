"""Read-only file tools inside the workspace root: fs.read, fs.list, fs.grep.

Every path is walked from a descriptor of the root by gormes/contained.py,
one component at a time without following links: `..` above the root, an
absolute path elsewhere and a symlink pointing out are all refused with
`PathOutsideWorkspace`, and no rename or swap racing the walk can lead it out. A
symlink that stays inside the root is followed; listings show links as links and
never enter a symlinked directory. Only regular files are read. Paths in outputs
are relative to the root. Reads, listings and matches are capped; a capped answer
says so (`truncated`). The store's own SQLite files (the database, its WAL, its
shared memory and journal), found by inode whatever the name or link that
reaches them, are never read: a workspace that holds the database would
otherwise hand every scope's memory and every run to any caller of fs.read (an
attacker's finding). The blocking work runs in a worker thread; grep uses RE2
(linear time: no pattern can stall it) and stops once its call is given up.
"""

from __future__ import annotations

import fnmatch
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import msgspec
import re2
import trio

from gormes.contained import Root, entries, open_entry, read_capped, walk_tree
from gormes.ops.spec import (
    InvalidOperationInput, OperationContext, OperationDenied, OperationSpec, OperationUnavailable,
    PathOutsideWorkspace,
)

READ_DEFAULT_BYTES = 64 * 1024
READ_MAX_BYTES = 1024 * 1024
READ_MAX_OFFSET = 2**63 - 1  # the largest file offset there is
LIST_MAX_ENTRIES = 5000
GREP_MAX_MATCHES = 1000
GREP_MAX_FILES = 10_000  # files searched by one grep, then it says `truncated`
GREP_MAX_FILE_BYTES = 2 * 1024 * 1024
GREP_MAX_PATTERN = 2000
GREP_LINE_CHARS = 400
GREP_STOP_CHECK_LINES = 4096
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


def open_root(root: Path) -> Root:
    try:
        return Root(root)
    except OSError as exc:
        raise OperationUnavailable(f"the workspace {str(root)!r} is not readable: {exc.strerror or exc}") from None


def resolve_inside(root: Path, path: str) -> Path:
    """Where `path` (relative to `root`, or absolute) lands, links inside the
    root followed; refused unless it exists and lies inside `root`. The answer
    is a name, not a handle: open through `Root` to be safe from races."""
    with open_root(root) as contained, contained.locate(path) as where:
        return contained.path.joinpath(*where.parts)


def _relative(parts: tuple[str, ...]) -> str:
    return "/".join(parts) or "."


# -- fs.read --------------------------------------------------------------------


class FsReadInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Read a text file in the workspace."""

    path: RelPath
    offset: Annotated[int, msgspec.Meta(ge=0, le=READ_MAX_OFFSET, description="Byte offset to start at.")] = 0
    max_bytes: Annotated[int, msgspec.Meta(ge=1, le=READ_MAX_BYTES)] = READ_DEFAULT_BYTES


class FsReadOutput(msgspec.Struct, kw_only=True):
    path: str
    content: str  # decoded as UTF-8, undecodable bytes replaced
    size: int  # the whole file's size in bytes
    offset: int
    bytes_read: int
    truncated: bool  # more of the file lies after what was read


def own_files(ctx: OperationContext) -> frozenset[tuple[int, int]]:
    """(device, inode) of the store's own SQLite files that exist (none on PostgreSQL)."""
    path = getattr(ctx.store, "path", None)
    if path is None:
        return frozenset()
    found = set()
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            st = os.stat(f"{path}{suffix}")
        except OSError:
            continue
        found.add((st.st_dev, st.st_ino))
    return frozenset(found)


def _read(root: Path, value: FsReadInput, own: frozenset[tuple[int, int]]) -> FsReadOutput:
    with open_root(root) as contained:
        fd, where = contained.open_file(value.path)
        where.close()
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) in own:
                raise OperationDenied(f"{value.path!r} is a file of gormes' own database: the fs tools never read it")
            size = st.st_size
            data = os.pread(fd, value.max_bytes, value.offset) if value.offset < size else b""
        finally:
            os.close(fd)
    return FsReadOutput(
        path=_relative(where.parts), content=data.decode("utf-8", "replace"), size=size,
        offset=value.offset, bytes_read=len(data), truncated=value.offset + len(data) < size,
    )


async def fs_read(ctx: OperationContext, value: FsReadInput) -> FsReadOutput:
    root = workspace_root(ctx)
    return await trio.to_thread.run_sync(_read, root, value, own_files(ctx), abandon_on_cancel=True)


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


def _list(root: Path, value: FsListInput) -> FsListOutput:
    with open_root(root) as contained:
        fd, where = contained.open_dir(value.path)
        where.close()
        top = _relative(where.parts)
        listed: list[FsEntry] = []
        try:
            tree = walk_tree(fd, where.parts) if value.recursive else [(where.parts, fd, entries(fd))]
            for parts, _dir_fd, found in tree:
                for entry in found:
                    if len(listed) >= value.max_entries:
                        return FsListOutput(path=top, entries=listed, truncated=True)
                    listed.append(FsEntry(path=_relative((*parts, entry.name)), kind=entry.kind, size=entry.size))
        finally:
            os.close(fd)
    return FsListOutput(path=top, entries=listed, truncated=False)


async def fs_list(ctx: OperationContext, value: FsListInput) -> FsListOutput:
    root = workspace_root(ctx)
    return await trio.to_thread.run_sync(_list, root, value, abandon_on_cancel=True)


# -- fs.grep --------------------------------------------------------------------


class FsGrepInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Search text files in the workspace for a regular expression (RE2 syntax:
    Python's, without backreferences or lookaround)."""

    pattern: Annotated[str, msgspec.Meta(min_length=1, max_length=GREP_MAX_PATTERN)]
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
    truncated: bool  # stopped at max_matches or GREP_MAX_FILES


class GrepAbandoned(Exception):
    """The call that wanted this grep is gone (timed out or cancelled)."""


def compile_pattern(pattern: str, ignore_case: bool) -> re2._Regexp:
    """The pattern under RE2 (linear time), or InvalidOperationInput."""
    options = re2.Options()
    options.log_errors = False  # RE2 would print its own line on stderr
    options.case_sensitive = not ignore_case
    try:
        pattern.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidOperationInput(f"invalid pattern {pattern!r}: not valid Unicode text") from None
    try:
        return re2.compile(pattern, options=options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise InvalidOperationInput(
            f"invalid pattern {pattern!r}: {reason} (RE2 syntax: no backreferences or lookaround)"
        ) from None


# Patterns whose meaning changes when a whole file is searched instead of one line:
# \A and \z (start and end of the text), and a flag group that turns multi-line off.
_LINE_BOUND = re.compile(r"\\[Az]|\(\?[A-Za-z]*-[A-Za-z]*m")


def compile_text_pattern(pattern: str, ignore_case: bool) -> re2._Regexp | None:
    """The pattern for searching a file's lines in one text, or None where only a
    search line by line keeps its meaning.

    Why: the RE2 binding releases the GIL around every call, and getting it back
    waits for whichever thread holds it (the event loop, busy); one call per line
    made a large grep crawl while the loop was busy (100,000 lines: 25 s beside a
    busy thread against 0.03 s alone). Searched as one text, a file costs one call
    and one more per matching line. `(?m)` makes ^ and $ match at each line, and
    `never_nl` keeps every match inside one line, so a match is a line's match."""
    if _LINE_BOUND.search(pattern):
        return None
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not ignore_case
    options.never_nl = True
    return re2.compile("(?m)" + pattern, options=options)


def _texts(contained: Root, top_fd: int, top: tuple[str, ...], is_dir: bool, glob: str | None,
           given_up: threading.Event):
    """(relative path, bytes) of each file to search, at most GREP_MAX_FILE_BYTES
    each; a symlinked file only when it points inside the root."""
    if not is_dir:
        data = read_capped(top_fd, GREP_MAX_FILE_BYTES)
        if data is not None:
            yield _relative(top), data
        return
    for parts, dir_fd, found in walk_tree(top_fd, top):
        if given_up.is_set():
            raise GrepAbandoned()
        for entry in found:
            if entry.kind not in ("file", "symlink"):
                continue
            if glob is not None and not fnmatch.fnmatch(entry.name, glob):
                continue
            rel = _relative((*parts, entry.name))
            if entry.kind == "symlink":
                try:
                    data, _ = contained.read_file(rel, GREP_MAX_FILE_BYTES)
                except (InvalidOperationInput, PathOutsideWorkspace, OSError):
                    continue  # a link out, dangling, looping, or not to a regular file
            else:
                fd = open_entry(dir_fd, entry)
                if fd is None:
                    continue
                try:
                    data = read_capped(fd, GREP_MAX_FILE_BYTES)
                finally:
                    os.close(fd)
            if data is not None:
                yield rel, data


def matching_lines(regex: re2._Regexp, whole: re2._Regexp | None, lines: list[str],
                   given_up: threading.Event) -> Iterator[tuple[int, str]]:
    """(number, line) of each line that matches: searched as one text where
    `whole` (compile_text_pattern) is given, else line by line with `regex`."""
    if whole is None:
        return _grep_lines(regex, lines, given_up)
    if not lines:
        return iter(())  # an empty file has no line, not one empty line
    return _grep_text(whole, "\n".join(lines), given_up)


def _grep_lines(regex: re2._Regexp, lines: list[str], given_up: threading.Event) -> Iterator[tuple[int, str]]:
    """(number, line) of each matching line, one search per line."""
    for number, line in enumerate(lines, 1):
        if number % GREP_STOP_CHECK_LINES == 0 and given_up.is_set():
            raise GrepAbandoned()
        if regex.search(line):
            yield number, line


def _grep_text(whole: re2._Regexp, text: str, given_up: threading.Event) -> Iterator[tuple[int, str]]:
    """(number, line) of each matching line of `text` (lines joined by newlines),
    one search for the whole text and one more after each matching line."""
    position, number, counted = 0, 1, 0
    while True:
        if given_up.is_set():
            raise GrepAbandoned()
        match = whole.search(text, position)
        if match is None:
            return
        start = match.start()
        number += text.count("\n", counted, start)
        counted = start
        end = text.find("\n", start)
        yield number, text[text.rfind("\n", 0, start) + 1:len(text) if end == -1 else end]
        if end == -1:
            return
        position = end + 1


def grep_workspace(root: Path, value: FsGrepInput, given_up: threading.Event) -> FsGrepOutput:
    regex = compile_pattern(value.pattern, value.ignore_case)
    whole = compile_text_pattern(value.pattern, value.ignore_case)
    matches: list[GrepMatch] = []
    searched = 0
    with open_root(root) as contained:
        fd, where, is_dir = contained.open(value.path)
        where.close()
        try:
            for rel, data in _texts(contained, fd, where.parts, is_dir, value.glob, given_up):
                if given_up.is_set():
                    raise GrepAbandoned()
                if b"\0" in data[:BINARY_SNIFF_BYTES]:
                    continue
                if searched >= GREP_MAX_FILES:
                    return FsGrepOutput(matches=matches, files_searched=searched, truncated=True)
                searched += 1
                lines = data.decode("utf-8", "replace").splitlines()
                for number, line in matching_lines(regex, whole, lines, given_up):
                    if len(matches) >= value.max_matches:
                        return FsGrepOutput(matches=matches, files_searched=searched, truncated=True)
                    matches.append(GrepMatch(path=rel, line=number, text=line[:GREP_LINE_CHARS]))
        finally:
            os.close(fd)
    return FsGrepOutput(matches=matches, files_searched=searched, truncated=False)


async def fs_grep(ctx: OperationContext, value: FsGrepInput) -> FsGrepOutput:
    root = workspace_root(ctx)
    given_up = threading.Event()
    try:
        return await trio.to_thread.run_sync(grep_workspace, root, value, given_up, abandon_on_cancel=True)
    finally:
        given_up.set()  # an abandoned worker stops at its next check instead of running on


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
