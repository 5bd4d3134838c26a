"""Opening a gormes SQLite file: the checks, the schema, the pragmas, the errors.

Nothing is written to a file that fails the checks: it is inspected through a
read-only connection first, and only a file that is ours (or empty) is opened
for writing, put in WAL mode and given the schema.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import time
from pathlib import Path

from gormes.errors import NotAGormesDatabase, SchemaTooNew, StoreError, StoreFull, StoreReadOnly

SCHEMA_VERSION = 1
APPLICATION_ID = 0x676F726D  # "gorm"
BUSY_TIMEOUT_S = 30.0
VERSION_CACHE_MAX = 200_000
DURABILITY = {"full": "FULL", "normal": "NORMAL"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events(
    position INTEGER PRIMARY KEY,
    stream TEXT NOT NULL,
    version INTEGER NOT NULL,
    type TEXT NOT NULL,
    type_version INTEGER NOT NULL DEFAULT 1,
    data TEXT NOT NULL,
    recorded_at REAL NOT NULL,
    UNIQUE(stream, version)
);
CREATE TABLE IF NOT EXISTS tracking(
    projection TEXT PRIMARY KEY,
    position INTEGER NOT NULL
);
"""

def default_db_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return Path(base) / "gormes" / "gormes.db"


def default_durability() -> str:
    """`full` (fsync on every commit) unless GORMES_DURABILITY says `normal`.

    `normal` in WAL mode keeps the database consistent after a crash but may lose
    the last commits on power loss: faster, and a documented choice, not a default.
    """
    return os.environ.get("GORMES_DURABILITY", "full")


def translate_error(exc: sqlite3.Error, path: str | os.PathLike[str]) -> StoreError:
    """Turn sqlite3's errors into gormes errors a person can act on."""
    text = str(exc)
    code = getattr(exc, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_FULL or "disk is full" in text:
        return StoreFull(f"disk full: cannot write to {path}; nothing of this write was recorded")
    if code is not None and code & 0xFF == sqlite3.SQLITE_IOERR:
        # A full disk shows as an I/O error where SQLite grows its -shm file on opening.
        if _disk_full(path):
            return StoreFull(f"disk full: cannot use {path}; nothing was recorded")
        return StoreError(f"disk I/O error on {path} ({getattr(exc, 'sqlite_errorname', code)})")
    if code == sqlite3.SQLITE_READONLY or "readonly" in text:
        return StoreReadOnly(f"{path} is read-only: cannot write events")
    if "not a database" in text or code == sqlite3.SQLITE_NOTADB:
        return NotAGormesDatabase(f"{path} is not a gormes database (not SQLite)")
    if code == sqlite3.SQLITE_CANTOPEN or "unable to open" in text:
        return StoreError(f"cannot open database {path}: {text}")
    return StoreError(f"database error on {path}: {text}")


def _disk_full(path: str | os.PathLike[str]) -> bool:
    try:
        return os.statvfs(Path(path).absolute().parent).f_bavail == 0
    except OSError:
        return False


def read_only_uri(path: str | os.PathLike[str]) -> str:
    """The URI that opens `path` read-only, also from read-only media.

    SQLite can read a WAL database only if it may create the `-shm` file beside
    it, unless told the file is immutable. On a read-only directory with no
    `-wal` file left over (a cleanly closed database) nothing can change the file,
    so `immutable=1` is exact there.
    """
    p = Path(path)
    uri = p.absolute().as_uri() + "?mode=ro"
    wal = p.with_name(p.name + "-wal")
    shm = p.with_name(p.name + "-shm")
    if not os.access(p.parent, os.W_OK) and not shm.exists():
        if not wal.exists() or wal.stat().st_size == 0:
            uri += "&immutable=1"
    return uri


def _inspect(path: Path) -> tuple[int, int, int]:
    """(application_id, user_version, table count) of an existing file, read-only."""
    uri = read_only_uri(path)
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error as exc:
        raise translate_error(exc, path) from None
    try:
        # One statement, so one snapshot: read separately, a creator committing in
        # between would show tables without our application_id.
        app_id, user_version, tables = conn.execute(
            "SELECT (SELECT application_id FROM pragma_application_id), "
            "(SELECT user_version FROM pragma_user_version), "
            "(SELECT count(*) FROM sqlite_master)"
        ).fetchone()
    except sqlite3.DatabaseError as exc:
        if (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL):
            raise translate_error(exc, path) from None  # the disk, not the file, is the trouble
        raise NotAGormesDatabase(f"{path} is not a gormes database: {exc}") from None
    finally:
        conn.close()
    return app_id, user_version, tables


def check_file(path: Path) -> bool:
    """Check an existing file is ours and not too new; True when it is still empty."""
    if path.is_dir():
        raise NotAGormesDatabase(f"{path} is a directory, not a gormes database")
    if not path.is_file():  # a FIFO would block the open forever; a device is never ours
        raise NotAGormesDatabase(f"{path} is not a regular file, not a gormes database")
    app_id, user_version, tables = _inspect(path)
    if app_id != APPLICATION_ID:
        if app_id == 0 and user_version == 0 and tables == 0:
            return True
        raise NotAGormesDatabase(
            f"{path} is an SQLite database but not a gormes one "
            f"(application_id {app_id:#x}); refusing to touch it"
        )
    if user_version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"{path} has schema version {user_version}, newer than this gormes "
            f"understands ({SCHEMA_VERSION}); upgrade gormes to open it"
        )
    return False


def _writable(path: Path) -> bool:
    if path.exists():
        return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    return os.access(path.parent, os.W_OK)


def connect(
    path: str | os.PathLike[str],
    *,
    readonly: bool = False,
    create: bool = True,
    durability: str | None = None,
) -> tuple[sqlite3.Connection, bool]:
    """Open (and if needed create) a gormes database; returns (connection, readonly).

    Nothing is written to a file that fails the checks. A file we may not write is
    opened read-only rather than refused, so reading commands still work on it.
    """
    durability = durability or default_durability()
    if durability not in DURABILITY:
        raise StoreError(f"durability must be one of {sorted(DURABILITY)}, not {durability!r}")
    p = Path(path)
    exists = p.exists()
    if exists:
        empty = check_file(p)
    else:
        if readonly or not create:
            raise StoreError(f"no gormes database at {p}")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise StoreReadOnly(f"cannot create {p.parent}: {exc.strerror}") from None
            raise StoreError(f"cannot create {p.parent}: {exc.strerror}") from None
        empty = True
    if not readonly and not _writable(p):
        if not exists:
            raise StoreReadOnly(f"cannot create {p}: directory is not writable")
        readonly = True
    try:
        if readonly:
            conn = sqlite3.connect(
                read_only_uri(p), uri=True, isolation_level=None,
                check_same_thread=False, timeout=BUSY_TIMEOUT_S,
            )
        else:
            conn = sqlite3.connect(
                p, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_S
            )
            if empty:
                # Before WAL writes the header: only a file with no pages yet takes it.
                # Retention's freed pages then go back to the filesystem (decision 0029).
                conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            _enable_wal(conn)
            conn.execute(f"PRAGMA synchronous={DURABILITY[durability]}")
            if empty:
                _create_schema(conn, p)
    except sqlite3.Error as exc:
        raise translate_error(exc, p) from None
    if readonly and empty:
        conn.close()
        raise StoreError(f"{p} is empty and read-only: not a gormes database yet")
    return conn, readonly


def _enable_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL, waiting out other processes doing the same.

    SQLite does not run the busy handler for this pragma: with several processes
    opening one new file at once, the losers get "database is locked" at once. WAL
    is a property of the file, so once anyone has switched it there is nothing to do.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.001
    while True:
        try:
            if conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal":
                return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
        if time.monotonic() > deadline:
            raise StoreError("could not switch the database to WAL mode: it stayed locked")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _create_schema(conn: sqlite3.Connection, path: Path) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if app_id == 0:  # another process may have won the race
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
