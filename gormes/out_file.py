"""Writing the file an `--out` names: only ever a new or a regular file.

`--out` must not replace a FIFO, a device node (as root, `--out /dev/null` would
replace the system's) or a symlink, nor write through one. The target is looked
at on a descriptor opened with `O_NOFOLLOW` (never following a link, never
blocking on a FIFO, never opening a device for I/O: `O_PATH`), and `fstat` of that
descriptor decides; the bytes go to a new temp file beside it (created with
`O_EXCL | O_NOFOLLOW`, so nothing planted under its name is written through),
renamed over the target at the end. A rename replaces a directory entry, never
writes into what it named, so whoever could swap the entry between the check and
the rename could as well have removed it.

    with replacing(Path("events.jsonl")) as out:
        out.write(b"...")
    write_under(Path("mirror"), "entities/ada.md", b"...")   # no link followed under the root

Refusals are `NotARegularFile` (exit 2); an OSError while writing (a full disk,
a read-only file system) leaves no temp file and becomes `CannotWrite` (exit 1),
naming the file.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from gormes.errors import GormesError, UserError

_LOOK = getattr(os, "O_PATH", os.O_RDONLY | os.O_NONBLOCK) | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotARegularFile(UserError):
    """An --out target that exists and is not a regular file (or a directory under
    a root that is a symlink); nothing was written."""


class CannotWrite(GormesError):
    """Writing an --out file failed (a full disk, a read-only file system, no
    permission); the target is as it was and no temp file is left."""

    exit_code = 1


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def check_target(name: str, *, dir_fd: int | None = None, shown: object = None) -> int | None:
    """Refuse unless `name` (in `dir_fd`) is missing or a regular file; its
    permission bits when it exists."""
    try:
        fd = os.open(name, _LOOK, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # where O_PATH is missing, O_NOFOLLOW refuses a link
            raise NotARegularFile(f"{shown or name} is a symlink, not a regular file; "
                                  "nothing written") from None
        raise CannotWrite(f"cannot write {shown or name}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    if not stat.S_ISREG(mode):
        raise NotARegularFile(f"{shown or name} is {_kind(mode)}, not a regular file; "
                              "nothing written")
    return stat.S_IMODE(mode)


def _new_temp(name: str, dir_fd: int | None) -> tuple[str, int]:
    for attempt in range(100):
        temp = f".{name}.partial-{os.getpid()}-{attempt}"
        try:
            return temp, os.open(temp, _NEW, 0o666, dir_fd=dir_fd)  # less the umask
        except FileExistsError:
            continue
    raise UserError(f"cannot make a temp file beside {name}")


@contextmanager
def _replacing_in(dir_fd: int | None, name: str, shown: object) -> Iterator[BinaryIO]:
    mode = check_target(name, dir_fd=dir_fd, shown=shown)
    try:
        temp, fd = _new_temp(name, dir_fd)
    except OSError as exc:
        raise CannotWrite(f"cannot write {shown}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            if mode is not None:  # a replaced file keeps its permissions (an audit trail kept 0600)
                os.fchmod(out.fileno(), mode)
            yield out
        check_target(name, dir_fd=dir_fd, shown=shown)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise CannotWrite(f"cannot write {shown}: {exc.strerror}") from None
        raise


@contextmanager
def replacing(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file whose bytes replace `path` whole when the block ends well
    (nothing changes at `path` if it raises)."""
    path = Path(path)
    try:
        dir_fd = os.open(path.parent, _DIR & ~os.O_NOFOLLOW)
    except OSError as exc:
        raise CannotWrite(f"cannot write {path}: {exc.strerror}") from None
    try:
        with _replacing_in(dir_fd, path.name, path) as out:
            yield out
    finally:
        os.close(dir_fd)


def write_bytes(path: str | Path, data: bytes) -> None:
    with replacing(path) as out:
        out.write(data)


def write_under(root: Path, relative: str, data: bytes) -> None:
    """Write `root/relative`, making `root` and the directories below it, and
    following no symlink below `root` (each directory is opened with O_NOFOLLOW
    from the one above)."""
    parts = Path(relative).parts
    if not parts or Path(relative).is_absolute() or any(p in (".", "..") for p in parts):
        raise NotARegularFile(f"{relative!r} does not name a file below {root}; nothing written")
    *dirs, name = parts
    try:
        root.mkdir(parents=True, exist_ok=True)  # the root itself is the operator's to name
        fd = os.open(root, _DIR & ~os.O_NOFOLLOW)
    except OSError as exc:
        raise CannotWrite(f"cannot write into {root}: {exc.strerror}") from None
    try:
        for part in dirs:
            try:
                os.mkdir(part, dir_fd=fd)
            except FileExistsError:
                pass
            except OSError as exc:
                raise CannotWrite(f"cannot write {root / part}: {exc.strerror}") from None
            try:
                below = os.open(part, _DIR, dir_fd=fd)
            except OSError:
                raise NotARegularFile(f"{root / part} is not a directory of its own (a symlink?); "
                                      "nothing written there") from None
            os.close(fd)
            fd = below
        with _replacing_in(fd, name, root / relative) as out:
            out.write(data)
    finally:
        os.close(fd)
