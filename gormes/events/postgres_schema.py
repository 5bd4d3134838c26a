"""Connecting to a gormes database on PostgreSQL: URLs, the schema, the errors.

The log lives in one PostgreSQL schema (the connection's `current_schema()`,
`public` unless the URL's `options=-csearch_path=...` or the store's `schema=`
says otherwise). A schema is ours when it holds the `gormes_meta` marker table;
an empty schema is given our tables; a schema holding anything else is refused
untouched, like a foreign SQLite file.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from gormes.errors import NotAGormesDatabase, SchemaTooNew, StoreError, StoreReadOnly

SCHEMA_VERSION = 1
APPLICATION = "gormes"
CONNECT_TIMEOUT_S = 5

_TABLES = (
    """CREATE TABLE gormes_meta(
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL)""",
    # position is assigned by the writer holding the table lock (max + 1), not by a
    # sequence: a rolled-back insert leaves no gap, as with SQLite's rowid.
    """CREATE TABLE events(
        position BIGINT PRIMARY KEY,
        stream TEXT NOT NULL,
        version BIGINT NOT NULL,
        type TEXT NOT NULL,
        type_version INTEGER NOT NULL DEFAULT 1,
        data TEXT NOT NULL,
        recorded_at DOUBLE PRECISION NOT NULL,
        UNIQUE(stream, version))""",
    "CREATE INDEX events_type ON events(type, position)",
    """CREATE TABLE tracking(
        projection TEXT PRIMARY KEY,
        position BIGINT NOT NULL)""",
)


# Connection parameters whose values are never shown (libpq's names).
SECRET_KEYS = frozenset({"password", "sslpassword"})
_MASK = "***"
_UNREADABLE = "(a connection string gormes cannot read)"


def redact(url: str) -> str:
    """The URL or keyword connection string with every password masked, fit for
    messages and logs: `user:pass@`, `?password=` and `?sslpassword=` in a URL
    (of any scheme: a mistyped one is shown in its refusal), `password=...` in
    `host=... password=...`."""
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", url):
        return _redact_uri(url)
    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return _UNREADABLE  # it may hold a password where libpq could not find it
    if not SECRET_KEYS & params.keys():
        return url
    return psycopg.conninfo.make_conninfo(
        **{key: _MASK if key in SECRET_KEYS else value for key, value in params.items()}
    )


def _redact_uri(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return _UNREADABLE
    netloc = parts.netloc
    users, at, hosts = netloc.rpartition("@")
    if at and ":" in users:
        netloc = f"{users.split(':', 1)[0]}:{_MASK}@{hosts}"
    query = "&".join(_redact_query_pair(pair) for pair in parts.query.split("&"))
    return urlunsplit(parts._replace(netloc=netloc, query=query if parts.query else ""))


def _redact_query_pair(pair: str) -> str:
    key = pair.partition("=")[0]
    # libpq's names are lower case, but a mistyped `PassWord=` is still a secret
    if unquote(key).strip().lower() in SECRET_KEYS:
        return f"{key}={_MASK}"
    return pair


def _secrets(url: str) -> list[str]:
    """The passwords `url` gives, to strip from what libpq says about it."""
    found = []
    try:
        found.append(urlsplit(url).password or "")
        found.extend(
            value for key, value in parse_qsl(urlsplit(url).query, keep_blank_values=True)
            if key.strip().lower() in SECRET_KEYS
        )
    except ValueError:
        pass
    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        params = {}
    found.extend(params.get(key) or "" for key in SECRET_KEYS)
    # very short values would mask ordinary words of the message
    return sorted({secret for secret in found if len(secret) >= 4}, key=len, reverse=True)


def without_secrets(text: str, url: str) -> str:
    """`text` (an error about connecting to `url`) with `url`'s passwords masked."""
    for secret in _secrets(url):
        text = text.replace(secret, _MASK)
    return text


def url_application_name(url: str) -> str | None:
    """The `application_name` a URL (or conninfo string) sets, if any."""
    try:
        return psycopg.conninfo.conninfo_to_dict(url).get("application_name")
    except psycopg.ProgrammingError:
        return None  # a malformed URL: connecting says what is wrong with it


def channel_name(schema: str) -> str:
    """The LISTEN/NOTIFY channel of one schema's log (channels are database-wide).
    PostgreSQL caps an identifier at 63 bytes, not characters: a name of
    non-ASCII letters is cut at the last whole character within them (cut by
    characters, pg_notify refused it inside every write transaction)."""
    name = "gormes_" + re.sub(r"\W", "_", schema)
    return name.encode()[:63].decode("utf-8", "ignore")


def connect(
    url: str, *, schema: str | None = None, application_name: str = APPLICATION
) -> psycopg.Connection:
    """An autocommit connection with the search_path set; errors become StoreErrors."""
    try:
        conn = psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            application_name=application_name,
        )
    except psycopg.Error as exc:
        raise StoreError(
            f"cannot connect to PostgreSQL at {redact(url)}: {without_secrets(first_line(exc), url)}"
        ) from None
    if schema:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    return conn


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


STANDBY = "the server is a read-only standby"


def cannot_write(conn: psycopg.Connection) -> str | None:
    """Why this session may not write the log, or None if it may: the server is a
    standby (a read replica), its transactions are read-only by default, or its
    role lacks INSERT on an existing `events` table. A read-only session opens the
    store read-only, as an SQLite file the process cannot write does: the reads
    work and every write is refused with this reason."""
    standby, read_only, insert = conn.execute(
        "SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only'),"
        " has_table_privilege(to_regclass('events'), 'INSERT')"
    ).fetchone()
    if standby:
        return STANDBY
    if read_only == "on":
        return "the session's transactions are read-only (default_transaction_read_only)"
    if insert is False:
        user = conn.execute("SELECT current_user").fetchone()[0]
        return f"role {user} may not insert into its events table"
    return None


def in_recovery(conn: psycopg.Connection) -> bool:
    """Whether the server is a standby (a read replica): it runs no LISTEN."""
    return conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]


def prepare(conn: psycopg.Connection, url: str, *, create: bool = True, readonly_reason: str | None = None) -> str:
    """Check the schema is ours (or empty, then create our tables); return its name.
    `readonly_reason`: why the session may not create them (see `cannot_write`)."""
    schema = conn.execute("SELECT current_schema()").fetchone()[0]
    where = f"{redact(url)} (schema {schema})"
    if schema is None:
        raise StoreError(f"{redact(url)}: the search_path names no existing schema")
    if "gormes_meta" in _tables_of(conn, schema):
        # Ours already: no lock. The creators' advisory lock is one any role may
        # take, so a reader holding it must not stop every open of the store.
        check_meta(conn, where)
        return schema
    with conn.transaction():
        # one creator at a time; others wait here and then find the tables made
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('gormes schema ' || %s))", (schema,))
        tables = _tables_of(conn, schema)
        if "gormes_meta" in tables:
            check_meta(conn, where)
            return schema
        if tables:
            shown = ", ".join(sorted(tables)[:5])
            raise NotAGormesDatabase(
                f"{where} holds tables of another application ({shown}); "
                "refusing to touch it: give gormes a database or schema of its own"
            )
        if readonly_reason is not None:
            raise StoreReadOnly(f"no gormes database at {where}, and none can be made there ({readonly_reason})")
        if not create:
            raise StoreError(f"no gormes database at {where}")
        for statement in _TABLES:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO gormes_meta(key, value) VALUES ('application', %s), ('schema_version', %s)",
            (APPLICATION, str(SCHEMA_VERSION)),
        )
    return schema


def _tables_of(conn: psycopg.Connection, schema: str) -> set[str]:
    return {
        name
        for (name,) in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        )
    }


def connect_read_only(url: str, *, application_name: str = APPLICATION) -> psycopg.Connection:
    """An autocommit connection to an existing gormes schema (nothing is created)
    on which every transaction is READ ONLY: the server refuses any write."""
    conn = connect(url, application_name=application_name)
    try:
        conn.execute("SET default_transaction_read_only = on")
        prepare(conn, url, create=False)
    except BaseException:
        conn.close()
        raise
    return conn


def check_meta(conn: psycopg.Connection, where: str) -> None:
    meta = dict(conn.execute("SELECT key, value FROM gormes_meta").fetchall())
    if meta.get("application") != APPLICATION:
        raise NotAGormesDatabase(f"{where} has a gormes_meta table not written by gormes")
    version = int(meta.get("schema_version", "0"))
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"{where} has schema version {version}, newer than this gormes "
            f"understands ({SCHEMA_VERSION}); upgrade gormes to open it"
        )


def is_connection_lost(exc: BaseException, conn: psycopg.Connection | None) -> bool:
    """True when `exc` means the server or the network went away, not a bad statement."""
    if conn is not None and (conn.closed or conn.broken):
        return True
    return isinstance(
        exc,
        (
            psycopg.InterfaceError,
            psycopg.errors.AdminShutdown,
            psycopg.errors.CrashShutdown,
            psycopg.errors.CannotConnectNow,
            psycopg.errors.ConnectionException,
        ),
    )


def closed_by_its_data(exc: BaseException) -> bool:
    """True when a statement's own parameter was refused before it was sent
    (psycopg's DataError with no SQLSTATE, as for text holding U+0000; inside a
    pipeline psycopg closes the connection too): the data's fault, not the server's
    or the network's."""
    return isinstance(exc, psycopg.DataError) and exc.sqlstate is None


def glob_regex(pattern: str) -> str:
    """A GLOB pattern (`job.*`, as the SQLite store takes) as a POSIX regex."""
    out = ["^"]
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            end = pattern.find("]", i + 2)
            if end == -1:
                out.append(r"\[")
            else:
                out.append(pattern[i : end + 1])
                i = end
        else:
            out.append(re.escape(c) if not c.isalnum() else c)
        i += 1
    out.append("$")
    return "".join(out)
