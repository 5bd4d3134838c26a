"""The read-only role `gormes query` logs in as on PostgreSQL (decision 0017).

A `READ ONLY` transaction stops writes to tables, not what a privileged role can
do to the server: a superuser's `COPY ... TO PROGRAM` runs a shell command, and a
`SET ROLE` into a weaker role is undone by `RESET ROLE` (or `set_config('role',
...)`) in the attacker's own SQL. So the statement runs on a session that LOGS IN
as a reader: a role that is no superuser, cannot create roles, replicate or
bypass row security, belongs to none of the predefined roles that reach the
server's files, programs or other sessions, and can write no table of the
schema; nor can any role it could `SET ROLE` to.

The reader is `GORMES_QUERY_URL` when the operator names one, else the role
`gormes_reader` (LOGIN, no password), which a role that may manage roles creates
on first use and grants USAGE on the schema and SELECT on its tables, nothing
else. Logging in without a password works where `pg_hba.conf` trusts the client
(as on a developer's loopback); elsewhere the operator gives `gormes_reader` a
password (in `~/.pgpass`) or names a reader of their own in `GORMES_QUERY_URL`.
A password-less LOGIN role opens no door that was closed: password methods refuse
a role with no password, and trust methods already admit any role.
"""

from __future__ import annotations

import os

import psycopg
from psycopg import sql

from gormes.errors import UserError

READER = "gormes_reader"
QUERY_URL_ENV = "GORMES_QUERY_URL"

# Predefined roles whose members reach beyond reading the schema's tables.
_WIDE_ROLES = (
    "pg_execute_server_program", "pg_write_server_files", "pg_read_server_files",
    "pg_signal_backend", "pg_checkpoint", "pg_write_all_data", "pg_read_all_data",
    "pg_read_all_settings", "pg_monitor", "pg_database_owner",
)

# Why each role the session could become (itself included) is not a reader, if so.
_WIDER_THAN_A_READER = """
SELECT r.rolname,
       CASE WHEN r.rolsuper THEN 'is a superuser'
            WHEN r.rolcreaterole THEN 'may create roles'
            WHEN r.rolreplication THEN 'may replicate'
            WHEN r.rolbypassrls THEN 'bypasses row security'
            WHEN r.rolname = ANY(%(wide)s) THEN 'is ' || r.rolname
            WHEN EXISTS (
                SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p')
                  AND has_table_privilege(r.oid, c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE'))
                 THEN 'may write the tables of schema ' || %(schema)s
       END
FROM pg_roles r
WHERE pg_has_role(session_user, r.oid, 'MEMBER')
"""


def why_not_a_reader(conn: psycopg.Connection, schema: str) -> str | None:
    """None when the session's login role is a reader of `schema`, else why not
    (naming the role: the login role or one it could switch to)."""
    rows = conn.execute(_WIDER_THAN_A_READER, {"wide": list(_WIDE_ROLES), "schema": schema})
    for role, why in rows:
        if why is not None:
            return f"role {role} {why}"
    return None


def may_manage_roles(conn: psycopg.Connection) -> bool:
    row = conn.execute(
        "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = session_user"
    ).fetchone()
    return bool(row and row[0])


def ensure_reader(conn: psycopg.Connection, schema: str) -> None:
    """Create `gormes_reader` if missing and grant it what reading `schema` needs
    (only what it lacks, so that a second run writes nothing). `conn` is an
    autocommit session of a role that may manage roles and owns the schema."""
    try:
        _grant_reading(conn, schema)
    except psycopg.Error as exc:
        from gormes.events.postgres_schema import first_line

        raise UserError(
            f"cannot set up the read-only role {READER} for schema {schema}: {first_line(exc)}; "
            f"name a read-only login role in {QUERY_URL_ENV} (see docs/postgres.md)"
        ) from None


def _grant_reading(conn: psycopg.Connection, schema: str) -> None:
    with conn.transaction():
        # one setter-up at a time: concurrent GRANTs on a table collide
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('gormes reader role'))")
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (READER,)).fetchone() is None:
            conn.execute(sql.SQL(
                "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT "
                "NOREPLICATION NOBYPASSRLS"
            ).format(sql.Identifier(READER)))
        if not _may_use_schema(conn, schema):
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                sql.Identifier(schema), sql.Identifier(READER)))
        for table in _unreadable_tables(conn, schema):
            conn.execute(sql.SQL("GRANT SELECT ON TABLE {}.{} TO {}").format(
                sql.Identifier(schema), sql.Identifier(table), sql.Identifier(READER)))
        # A GRANT by a role without the grant option only warns: see what holds.
        if not _may_use_schema(conn, schema) or _unreadable_tables(conn, schema):
            raise psycopg.errors.InsufficientPrivilege(
                "no privileges were granted (this role may not grant them on the schema)")


def _may_use_schema(conn: psycopg.Connection, schema: str) -> bool:
    return conn.execute("SELECT has_schema_privilege(%s, %s, 'USAGE')", (READER, schema)).fetchone()[0]


def _unreadable_tables(conn: psycopg.Connection, schema: str) -> list[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') "
        "AND NOT has_table_privilege(%s, c.oid, 'SELECT')",
        (schema, READER),
    )
    return [table for (table,) in rows]


def named_reader() -> str | None:
    """The reader the operator named in `GORMES_QUERY_URL`, if any."""
    return os.environ.get(QUERY_URL_ENV) or None


def reader_conninfo(url: str) -> str:
    """Where the reader logs in: `GORMES_QUERY_URL` if set, else `url` with the
    user `gormes_reader` and without `url`'s password (it is not the reader's)."""
    named = named_reader()
    if named is not None:
        return named
    params = psycopg.conninfo.conninfo_to_dict(url)
    params.pop("password", None)
    params["user"] = READER
    return psycopg.conninfo.make_conninfo(**params)


def login_hint() -> str:
    if named_reader() is not None:
        return f"the reader named by {QUERY_URL_ENV}"
    return (f"gormes query logs in as {READER}: give it a password in ~/.pgpass, "
            f"or name a read-only login role in {QUERY_URL_ENV}; see docs/postgres.md")


def refuse_wide_role(why: str, where: str) -> UserError:
    return UserError(
        f"refusing to run a query at {where}: {why}; gormes query runs only as a "
        f"read-only role (set {QUERY_URL_ENV} to one, see docs/postgres.md)"
    )
