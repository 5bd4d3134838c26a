"""The doctor on PostgreSQL: the gate, the server, and the database's size.

`open_database(url)` is the `store.schema` check for a URL, as
`store.open_database` is for a file: it connects, makes the session read-only
(`default_transaction_read_only`: the server refuses any write the checks might
attempt) and checks that the schema is gormes's. The connection it returns is a
`PortableConnection`, so the other checks run their shared SQL on it.

The SQLite-only checks (journal mode, `PRAGMA quick_check`, free space beside
the file) are skipped on PostgreSQL with the reason (see their `elsewhere`);
these two run instead:

- `store.server`: the server's version (13 or newer: the store needs
  `pg_current_xact_id`), whether it is a standby (writers would fail), `fsync`,
  and how many of `max_connections` are in use;
- `disk.database_size`: `pg_database_size` and the schema's own tables. The
  server's free disk space cannot be seen from a client: that is said, not
  guessed.
"""

from __future__ import annotations

from typing import Any

from gormes.health import Check, DoctorContext, Verdict, fail, ok, size, warn

MIN_SERVER_VERSION = 130000
CONNECTIONS_WARN_FRACTION = 0.9

CONNECT = "check the URL, that the server runs, and that it accepts this user (pg_hba.conf)"


def open_database(url: str) -> tuple[Any | None, Verdict]:
    """A read-only `PortableConnection` and the `store.schema` verdict; no
    connection when the schema is not one the other checks can read."""
    # Lazy for start-up time: psycopg is loaded only for a PostgreSQL URL.
    import psycopg

    from gormes.errors import NotAGormesDatabase, SchemaTooNew, StoreError
    from gormes.events.postgres_schema import (
        SCHEMA_VERSION,
        connect,
        first_line,
        prepare,
        redact,
    )
    from gormes.events.postgres_sql import PortableConnection

    try:
        conn = connect(url, application_name="gormes doctor")
    except StoreError as exc:
        return None, fail(str(exc), CONNECT)
    where, schema = redact(url), None
    try:
        conn.execute("SET default_transaction_read_only = on")
        schema = conn.execute("SELECT current_schema()").fetchone()[0]
        where = f"{where} (schema {schema})"
        prepare(conn, url, create=False)
        version = int(conn.execute(
            "SELECT value FROM gormes_meta WHERE key = 'schema_version'"
        ).fetchone()[0])
    except (NotAGormesDatabase, SchemaTooNew) as exc:
        conn.close()
        return None, fail(str(exc), "point --db at gormes's database or schema; gormes never "
                          "touches another application's tables" if isinstance(exc, NotAGormesDatabase)
                          else "upgrade gormes; this version must not write to the schema")
    except StoreError:
        conn.close()
        if schema is None:
            return None, fail(f"{where}: the search_path names no existing schema",
                              "create the schema, or fix options=-csearch_path=... in the URL")
        return None, warn(
            f"{where} is empty: no gormes schema yet",
            "run any write command once (e.g. `gormes jobs submit echo`) to create the schema",
        )
    except psycopg.Error as exc:
        conn.close()
        return None, fail(f"{where} cannot be read: {first_line(exc)}", CONNECT)
    portable = PortableConnection(conn)
    if version < SCHEMA_VERSION:
        return portable, warn(
            f"schema version {version} is older than this gormes's ({SCHEMA_VERSION})",
            "open it once with a write command of this gormes to migrate it",
        )
    return portable, ok(f"gormes database in {where}, schema version {version}")


def check_server(ctx: DoctorContext) -> Verdict:
    version_num, version, standby, fsync, used, limit = ctx.db.execute(
        "SELECT current_setting('server_version_num')::int, current_setting('server_version'), "
        "pg_is_in_recovery(), current_setting('fsync'), "
        "(SELECT count(*) FROM pg_stat_activity), current_setting('max_connections')::int"
    ).fetchone()
    text = f"PostgreSQL {version}, {'standby' if standby else 'primary'}, fsync {fsync}, " \
           f"{used} of {limit} connections in use"
    if version_num < MIN_SERVER_VERSION:
        return fail(f"{text}: gormes needs PostgreSQL 13 or newer (pg_current_xact_id)",
                    "upgrade the server")
    if standby:
        return warn(f"{text}: a standby is read-only, so writers cannot append here",
                    "point writers (workers, the daemon) at the primary")
    if fsync != "on":
        return warn(f"{text}: with fsync off a server crash can corrupt the database",
                    "set fsync = on in postgresql.conf and reload the server")
    if used >= CONNECTIONS_WARN_FRACTION * limit:
        return warn(f"{text}: over {CONNECTIONS_WARN_FRACTION:.0%} used, new workers may be refused",
                    "raise max_connections, or run fewer worker processes (more --concurrency each)")
    return ok(text)


def check_size(ctx: DoctorContext) -> Verdict:
    database, total, schema, own = ctx.db.execute(
        "SELECT current_database(), pg_database_size(current_database()), current_schema(), "
        "(SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm', 'p'))"
    ).fetchone()
    return ok(
        f"database {database} holds {size(total)}, gormes's schema {schema} {size(own)} "
        "(the server's free disk space cannot be seen from a client: watch it on the server)"
    )


CHECKS = [
    Check(name="store.server", category="store", run=check_server, backend="postgres"),
    Check(name="disk.database_size", category="disk", run=check_size, backend="postgres"),
]
