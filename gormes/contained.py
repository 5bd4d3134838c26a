"""Open paths beneath a root so that no symlink and no race leads out of it.

The one containment routine of the fs tools (gormes/tools/fs.py) and the
knowledge root (gormes/knowledge/), below both so that neither reaches into the
other. A path is walked one component at a time from a descriptor of the root:
every directory is opened with `O_NOFOLLOW | O_DIRECTORY` relative to its
parent's descriptor (the `*at()` calls, `dir_fd=`), and every file with
`O_NOFOLLOW`, so what was checked is what is opened, whatever is renamed or
swapped meanwhile: a directory swapped for a symlink is simply a symlink met on
the walk.

    ..        is taken against the directories walked so far; above the root it
              is refused (`PathOutsideWorkspace`)
    symlinks  are read (readlinkat) and, when the target stays inside the root,
              walked in their stead from where they lie, again component by
              component (at most MAX_SYMLINKS of them); a link pointing outside
              is refused, so nothing outside is ever opened, read, listed or
              written through
    absolute  paths (given, or a link's target) must start with the root's path
              (as resolved, or as configured); the rest is walked as above
    files     only regular files are opened to read (`O_NONBLOCK`: a FIFO
              swapped in cannot block the open); FIFOs, sockets and devices are
              refused as "not a regular file"
    depth     a path (links followed) may go at most MAX_DEPTH directories below
              the root, as deep as a tree walk goes: the walk holds a descriptor
              of each directory on the way (for `..`), so a deeper one (a few KB
              of `d/d/d/...`) would hold thousands, or dig that many directories
              with `make_dirs`; it is refused before the directory past that depth
              is made or opened

Hard links are regular files of the tree: they are read like any other (a hard
link to an outside file is out of scope); writes replace the name atomically, so
they never modify the linked inode. The root itself is the operator's
configuration and is resolved once, links and all.

POSIX `*at()` calls only (Linux, the BSDs and macOS have them all); Linux's
`openat2(RESOLVE_BENEATH)` is not reachable from Python's `os` module, so it is
not used.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from gormes.ops.spec import InvalidOperationInput, PathOutsideWorkspace

MAX_SYMLINKS = 40  # links followed (and looks repeated after a race) in one walk, as Linux's own
MAX_DEPTH = 64  # directories below the root that a tree walk descends, and a path may go
MAX_RETRIES = 8  # a name that changes kind between look and open is looked at again

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | _CLOEXEC
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC


class _Raced(Exception):
    """A name changed kind between being looked at and being opened."""


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """One name in a directory, as it is (links not followed)."""

    name: str
    kind: str  # "file", "dir", "symlink" or "other"
    size: int | None = None  # files only


class Located:
    """Where a path lands: the directory holding it (`dir_fd`, owned) and its
    `name` there (None when the path names that directory itself), its real
    components below the root, and its lstat (None when it does not exist)."""

    def __init__(self, dir_fd: int, name: str | None, parts: tuple[str, ...], info: os.stat_result | None) -> None:
        self.dir_fd, self.name, self.parts, self.info = dir_fd, name, parts, info

    @property
    def relative(self) -> str:
        return "/".join(self.parts) or "."

    def close(self) -> None:
        os.close(self.dir_fd)

    def __enter__(self) -> Located:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def kind_of(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


class Root:
    """A directory opened once; every path below it is walked from its descriptor.
    `label` names it in refusals ("workspace", "knowledge root")."""

    def __init__(self, path: Path, label: str = "workspace") -> None:
        self.label = label
        self.given = Path(os.path.abspath(path))
        self.path = path.resolve(strict=True)
        self.fd = os.open(self.path, DIR_FLAGS & ~os.O_NOFOLLOW)

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Root:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- refusals ------------------------------------------------------------------

    def outside(self, given: str) -> PathOutsideWorkspace:
        return PathOutsideWorkspace(f"path {given!r} is outside the {self.label}")

    # -- walking -------------------------------------------------------------------

    def components(self, path: str, given: str) -> list[str]:
        """`path` as components below the root (an absolute one must start with
        the root's path); `.` and empty components dropped, `..` kept."""
        if "\0" in path:
            raise InvalidOperationInput(f"path {given!r} contains a NUL byte")
        try:
            os.fsencode(path)
        except UnicodeEncodeError:
            raise InvalidOperationInput(f"path {given!r} is not a valid file name here") from None
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if not path.startswith("/"):
            return parts
        for base in (self.path, self.given):
            prefix = list(base.parts[1:])
            if parts[: len(prefix)] == prefix:
                return parts[len(prefix):]
        raise self.outside(given)

    def locate(self, path: str, *, missing_ok: bool = False, make_dirs: bool = False) -> Located:
        """Walk `path`, following links that stay inside; see the module doc.
        `missing_ok`: a missing last component is located (info None);
        `make_dirs`: missing directories on the way are created."""
        given = path
        pending = list(reversed(self.components(path, given)))
        dirs = [os.dup(self.fd)]
        names: list[str] = []
        hops = 0
        try:
            while pending:
                name = pending.pop()
                if name == "..":
                    if not names:
                        raise self.outside(given)
                    os.close(dirs.pop())
                    names.pop()
                    continue
                last = not pending
                try:
                    info = os.stat(name, dir_fd=dirs[-1], follow_symlinks=False)
                except FileNotFoundError:
                    if last and missing_ok:
                        return Located(dirs.pop(), name, (*names, name), None)
                    if make_dirs and not last:
                        _within_depth(names, given)
                        if not _mkdir(name, dirs[-1]):
                            hops = _again(hops, given)  # made (or swapped in) meanwhile
                        pending.append(name)
                        continue
                    raise InvalidOperationInput(f"no such file or directory: {given!r}") from None
                except OSError as exc:
                    raise _cannot(given, exc) from None
                if stat.S_ISLNK(info.st_mode):
                    hops = _again(hops, given)
                    try:
                        target = os.readlink(name, dir_fd=dirs[-1])
                    except OSError as exc:
                        if exc.errno in (errno.EINVAL, errno.ENOENT):
                            hops = _again(hops, given)
                            pending.append(name)  # no longer a link: look again
                            continue
                        raise _cannot(given, exc) from None
                    if target.startswith("/"):
                        below = self.components(target, given)
                        for fd in dirs:
                            os.close(fd)
                        dirs[:] = [os.dup(self.fd)]
                        names.clear()
                        pending.extend(reversed(below))
                    else:
                        pending.extend(reversed([p for p in target.split("/") if p not in ("", ".")]))
                    continue
                if last:
                    return Located(dirs.pop(), name, (*names, name), info)
                if not stat.S_ISDIR(info.st_mode):
                    raise InvalidOperationInput(f"not a directory: {'/'.join((*names, name))!r} in {given!r}")
                _within_depth(names, given)
                try:
                    fd = os.open(name, DIR_FLAGS, dir_fd=dirs[-1])
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                        hops = _again(hops, given)  # swapped since the look: look again
                        pending.append(name)
                        continue
                    raise _cannot(given, exc) from None
                dirs.append(fd)
                names.append(name)
            top = dirs.pop()
            return Located(top, None, tuple(names), os.fstat(top))
        finally:
            for fd in dirs:
                os.close(fd)

    def open_file(self, path: str) -> tuple[int, Located]:
        """A descriptor of the regular file `path` names (the caller closes both)."""
        fd, where, _ = self.open(path, want="file")
        return fd, where

    def open_dir(self, path: str) -> tuple[int, Located]:
        """A descriptor of the directory `path` names (the caller closes both)."""
        fd, where, _ = self.open(path, want="dir")
        return fd, where

    def open(self, path: str, want: str = "any") -> tuple[int, Located, bool]:
        """A descriptor of the regular file or directory `path` names, where it
        is, and whether it is a directory; `want` "file" or "dir" refuses the other."""
        for _ in range(MAX_RETRIES):
            where = self.locate(path)
            try:
                is_dir = where.name is None or stat.S_ISDIR(where.info.st_mode)
                if is_dir and want == "file":
                    raise InvalidOperationInput(f"not a file: {path!r}")
                if not is_dir and want == "dir":
                    raise InvalidOperationInput(f"not a directory: {path!r}")
                if not is_dir:
                    return open_regular(where.dir_fd, where.name, path, where.info), where, False
                if where.name is None:
                    return os.dup(where.dir_fd), where, True
                try:
                    return os.open(where.name, DIR_FLAGS, dir_fd=where.dir_fd), where, True
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                        raise _Raced() from None
                    raise _cannot(path, exc) from None
            except _Raced:
                where.close()
            except BaseException:
                where.close()
                raise
        raise InvalidOperationInput(f"{path!r} kept changing while it was opened")

    def read_file(self, path: str, limit: int) -> tuple[bytes | None, tuple[str, ...]]:
        """The regular file `path` names (None when it holds more than `limit`
        bytes) and its real components. Refusals as `open_file`."""
        fd, where = self.open_file(path)
        where.close()
        try:
            return read_capped(fd, limit), where.parts
        finally:
            os.close(fd)


def open_regular(dir_fd: int, name: str | None, given: str, info: os.stat_result | None) -> int:
    """Open `name` in `dir_fd` for reading if it is a regular file, without
    following a link and without blocking on a FIFO."""
    if name is None or info is None or stat.S_ISDIR(info.st_mode):
        raise InvalidOperationInput(f"not a file: {given!r}")
    if not stat.S_ISREG(info.st_mode):
        raise InvalidOperationInput(f"not a regular file: {given!r} (a FIFO, socket or device)")
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENXIO):
            raise _Raced() from None
        raise _cannot(given, exc) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _Raced()
    return fd


def open_entry(dir_fd: int, entry: Entry) -> int | None:
    """A descriptor of a regular file met in a tree walk; None if it is no longer one."""
    try:
        info = os.stat(entry.name, dir_fd=dir_fd, follow_symlinks=False)
        return open_regular(dir_fd, entry.name, entry.name, info)
    except (_Raced, InvalidOperationInput, OSError):
        return None


def read_capped(fd: int, limit: int) -> bytes | None:
    """The whole file behind `fd`, or None when it holds more than `limit` bytes."""
    if os.fstat(fd).st_size > limit:
        return None
    chunks = []
    total = 0
    while chunk := os.read(fd, min(1 << 20, limit + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            return None
    return b"".join(chunks)


def entries(dir_fd: int) -> list[Entry]:
    """The directory's names, sorted, each as it is (links not followed)."""
    found = []
    with os.scandir(dir_fd) as it:
        for item in it:
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue
            kind = kind_of(info.st_mode)
            found.append(Entry(name=item.name, kind=kind, size=info.st_size if kind == "file" else None))
    return sorted(found, key=lambda e: e.name)


def walk_tree(
    dir_fd: int, parts: tuple[str, ...] = (), depth: int = 0, *, enter: Callable[[str], bool] | None = None,
) -> Iterator[tuple[tuple[str, ...], int, list[Entry]]]:
    """(components, descriptor, entries) for the directory and every directory
    below it that `enter(name)` allows, each listing before its subdirectories;
    subdirectories are opened with O_NOFOLLOW from their parent (a symlinked
    directory is never entered) down to MAX_DEPTH. The descriptors are closed
    once the walk moves on."""
    try:
        found = entries(dir_fd)
    except OSError:
        return
    yield parts, dir_fd, found
    if depth >= MAX_DEPTH:
        return
    for entry in found:
        if entry.kind != "dir" or (enter is not None and not enter(entry.name)):
            continue
        try:
            child = os.open(entry.name, DIR_FLAGS, dir_fd=dir_fd)
        except OSError:
            continue  # gone, unreadable, or swapped for a symlink
        try:
            yield from walk_tree(child, (*parts, entry.name), depth + 1, enter=enter)
        finally:
            os.close(child)


def replace_file(dir_fd: int, name: str, data: bytes) -> None:
    """Put `data` at `name` in `dir_fd` atomically and durably: a new file beside
    it, fsync'ed, renamed over it (a link or hard link there is replaced, never
    written through), then the directory fsync'ed."""
    temp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(temp, NEW_FILE_FLAGS, 0o644, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    os.fsync(dir_fd)


def _again(hops: int, given: str) -> int:
    """One more link followed (or name looked at again after a race); past
    MAX_SYMLINKS the walk gives up, as the kernel does with a symlink loop."""
    if hops >= MAX_SYMLINKS:
        raise InvalidOperationInput(f"cannot resolve {given!r}: too many levels of symlinks (or it kept changing)")
    return hops + 1


def _within_depth(names: list[str], given: str) -> None:
    """Refuse to go one directory further when the walk is MAX_DEPTH deep already."""
    if len(names) >= MAX_DEPTH:
        shown = given if len(given) <= 120 else given[:60] + "..." + given[-40:]
        raise InvalidOperationInput(f"path {shown!r} goes deeper than {MAX_DEPTH} directories below the root")


def _mkdir(name: str, dir_fd: int) -> bool:
    """Make the directory; False when something by that name appeared meanwhile
    (the walk looks at it again)."""
    try:
        os.mkdir(name, 0o777, dir_fd=dir_fd)
    except FileExistsError:
        return False
    return True


def _cannot(given: str, exc: OSError) -> InvalidOperationInput:
    return InvalidOperationInput(f"cannot open {given!r}: {exc.strerror or exc}")
