"""Attacks on `gormes query`: the attacker writes the SQL, `gormes query` runs it in
a subprocess against a real SQLite file or the real PostgreSQL server (connected
as a superuser, as the test URL is). Every attempt to act on the server, to write,
to run long or to read a password back must end in one line, with nothing
recorded lost or changed."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pg_helpers import PG_URL, admin, as_role, fresh_schema, login_role, url_for_schema

from cli_helpers import (
    SAMPLE,
    assert_one_line_error,
    cli_env,
    digest,
    gormes_command,
    json_lines,
    run_gormes,
    write_notes,
    write_sample,
)
from gormes.events.notes import NoteAdded

REFUSED = "gormes query is read-only"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """An SQLite file holding the SAMPLE notes at positions 1..4."""
    path = tmp_path / "gormes.db"
    write_notes(path, SAMPLE)
    return path


@pytest.fixture
def schema() -> Iterator[str]:
    with fresh_schema() as name:
        write_sample(url_for_schema(name))
        yield name


def events_of(schema: str) -> list[tuple]:
    return admin(f'SELECT position, stream, version, type, data FROM "{schema}".events ORDER BY 1')


def logged_events_of(schema: str) -> list[tuple]:
    """The events but the audit records (`gormes append` is audited)."""
    return [e for e in events_of(schema) if not e[1].startswith("audit-")]


def query(db: str | Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gormes_command(db, "query", *args), capture_output=True, text=True,
                          env=env or cli_env(), timeout=120)


def rebuild_check(db: str | Path) -> None:
    done = run_gormes(db, "projections", "rebuild", "--check")
    assert done.returncode == 0, done.stderr


def assert_refused(done: subprocess.CompletedProcess[str]) -> str:
    line = assert_one_line_error(done)
    assert done.returncode == 2, done
    assert line.startswith("gormes: error: refused: "), line
    assert line.endswith(REFUSED), line
    return line


# --- hole 5: the server, not only the transaction, is out of the query's reach ---


def test_copy_to_program_runs_no_shell_command(schema: str, tmp_path: Path):
    marker = tmp_path / "ran"
    before = events_of(schema)
    delete = f'DELETE FROM "{schema}".events WHERE position = 1'
    program = f"psql -h 127.0.0.1 -U postgres test -c '{delete}'; touch {marker}"
    sql = "COPY (SELECT 1) TO PROGRAM '" + program.replace("'", "''") + "'"
    assert_refused(query(url_for_schema(schema), sql))
    assert not marker.exists()
    assert events_of(schema) == before
    rebuild_check(url_for_schema(schema))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT pg_reload_conf()",
        "CHECKPOINT",
        "SELECT pg_read_file('/etc/passwd')",
        "SELECT pg_ls_dir('.')",
        "SELECT lo_export(1, '{out}')",
        "SELECT lo_export(lo_from_bytea(0, 'x'), '{out}')",
        "COPY (SELECT 1) TO '{out}'",
        "SET ROLE postgres",
        "SET SESSION AUTHORIZATION postgres",
        "SELECT set_config('role', 'postgres', true), pg_read_file('/etc/hostname')",
        # a superuser's session may switch back from a SET ROLE; a reader's login may not
        "DO $$ BEGIN RESET ROLE; PERFORM pg_read_file('/etc/hostname'); END $$",
        "DO $$ BEGIN SET SESSION AUTHORIZATION postgres; "
        "EXECUTE 'COPY (SELECT 1) TO PROGRAM ''true'''; END $$",
        "DO $$ BEGIN LOCK TABLE events IN ACCESS EXCLUSIVE MODE; END $$",
        "LOCK TABLE events IN ACCESS EXCLUSIVE MODE",
        "CREATE EXTENSION dblink",
    ],
)
def test_server_actions_are_refused(schema: str, sql: str):
    # the server writes as its own user: a fresh name in /tmp, where it may
    out = Path(f"/tmp/gormes-attack-{secrets.token_hex(6)}")
    before = events_of(schema)
    try:
        assert_refused(query(url_for_schema(schema), sql.format(out=out)))
        assert not out.exists()
    finally:
        out.unlink(missing_ok=True)
    assert events_of(schema) == before


def test_another_session_cannot_be_terminated(schema: str):
    with psycopg.connect(PG_URL, autocommit=True, application_name="gormes-victim") as victim:
        sql = ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
               "WHERE application_name = 'gormes-victim'")
        assert_refused(query(url_for_schema(schema), sql))
        assert victim.execute("SELECT 1").fetchone() == (1,)


def test_the_query_runs_logged_in_as_the_reader(schema: str):
    done = query(url_for_schema(schema), "--json",
                 "SELECT session_user AS s, current_user AS c, "
                 "current_setting('transaction_read_only') AS ro")
    assert done.returncode == 0, done.stderr
    assert json_lines(done.stdout) == [{"s": "gormes_reader", "c": "gormes_reader", "ro": "on"}]


def _wait_until_running(attack: subprocess.Popen, marker: str) -> None:
    """Until the attacker's statement is running on the server (or the CLI ended)."""
    while attack.poll() is None:
        rows = admin("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                     "AND query LIKE %s", (f"%{marker}%",))
        if rows[0][0]:
            return
        time.sleep(0.05)


def _end_on_the_server(marker: str) -> None:
    """A killed client leaves its statement running on the server: end it there."""
    admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
          "WHERE query LIKE %s AND pid <> pg_backend_pid()", (f"%{marker}%",))


def append_one(url: str) -> subprocess.CompletedProcess[str]:
    return run_gormes(url, "append", "victim", "note.added", "--data", '{"text": "still writes"}')


def test_a_lock_taken_in_a_do_block_does_not_block_a_writer(schema: str):
    url = url_for_schema(schema)
    sql = ("DO $$ BEGIN LOCK TABLE events IN ACCESS EXCLUSIVE MODE; "
           "PERFORM pg_sleep(20); END $$ -- attack-lock")
    attack = subprocess.Popen(gormes_command(url, "query", sql), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=cli_env())
    try:
        _wait_until_running(attack, "attack-lock")
        appended = append_one(url)
        assert appended.returncode == 0, appended.stderr
        # the append is done: the attacker's statement must have been refused, not
        # have held the lock for its 20 s and then succeeded
        out, err = attack.communicate(timeout=120)
    finally:
        attack.kill()
        attack.wait()
        _end_on_the_server("attack-lock")
    assert_refused(subprocess.CompletedProcess(attack.args, attack.returncode, out, err))
    assert len(logged_events_of(schema)) == len(SAMPLE) + 1  # the append's audit record aside
    rebuild_check(url)


def test_a_writer_completes_while_a_long_read_is_running(schema: str):
    url = url_for_schema(schema)
    sql = "SELECT pg_sleep(100), count(*) FROM events -- attack-long-read"
    with subprocess.Popen(gormes_command(url, "query", "--timeout", "300", sql),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env()) as attack:
        try:
            _wait_until_running(attack, "attack-long-read")
            appended = append_one(url)
            assert appended.returncode == 0, appended.stderr
            assert attack.poll() is None  # the read was still running when the write finished
        finally:
            attack.kill()
            _end_on_the_server("attack-long-read")
    assert len(logged_events_of(schema)) == len(SAMPLE) + 1  # the append's audit record aside


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT pg_sleep(600)",
        # the limit is the server's, set before the statement: undoing it inside does nothing
        "DO $$ BEGIN SET LOCAL statement_timeout = 0; PERFORM pg_sleep(600); END $$",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
    ],
)
def test_a_statement_that_runs_forever_is_stopped_by_the_timeout(schema: str, sql: str):
    done = query(url_for_schema(schema), "--timeout", "1", sql)
    line = assert_one_line_error(done)
    assert "timed out after 1 s" in line and "--timeout" in line, line
    assert done.returncode == 1
    assert admin("SELECT count(*) FROM pg_stat_activity WHERE query = %s", (sql,)) == [(0,)]


def test_a_bad_timeout_is_one_line(db: Path):
    for value in ("0", "-1", "nan", "inf", "1e30", "soon"):
        done = run_gormes(db, "query", "--timeout", value, "SELECT 1")
        assert "--timeout" in assert_one_line_error(done) and done.returncode == 2


def test_a_huge_result_streams_in_bounded_memory(schema: str):
    """Own attack: a gateway-sized result (2 million rows) must not be held in memory
    by the CLI; its peak memory stays near that of a tiny result."""

    def peak_kib(rows: int) -> int:
        sql = f"SELECT n, repeat('x', 100) AS pad FROM generate_series(1, {rows}) AS n"
        proc = subprocess.Popen(gormes_command(url_for_schema(schema), "query", "--json", sql),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cli_env())
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        assert proc.returncode == 0, proc.stderr.read()
        proc.stderr.close()
        return usage.ru_maxrss

    small, large = peak_kib(10), peak_kib(2_000_000)
    # 2e6 rows of ~110 bytes are 220 MB held at once; streamed, the peak barely
    # moves (ru_maxrss is in KiB on Linux)
    assert large < small + 60_000, (small, large)


# --- hole 14: a statement is executed once, even when it returns no row ---


def test_a_statement_with_no_row_runs_once(schema: str):
    from gormes.cli.query_postgres import open_read_only, run

    admin(f'CREATE FUNCTION "{schema}".noisy() RETURNS SETOF int LANGUAGE plpgsql '
          "AS $$ BEGIN RAISE NOTICE 'ran'; RETURN; END $$")
    conn = open_read_only(url_for_schema(schema))
    notices: list[str] = []
    conn.add_notice_handler(lambda diag: notices.append(diag.message_primary))
    try:
        with run(conn, "SELECT * FROM noisy() AS x") as (columns, rows):
            assert (columns, list(rows)) == (["x"], [])
        with run(conn, "DO $$ BEGIN RAISE NOTICE 'ran'; END $$") as (columns, rows):
            assert (columns, list(rows)) == ([], [])
    finally:
        conn.close()
    assert notices == ["ran", "ran"]


# --- hole 6: SQLite's query is bounded in time and stops on Ctrl-C ---

FOREVER = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"


def test_a_recursive_cte_on_sqlite_times_out(db: Path):
    before = digest(db)
    done = run_gormes(db, "query", "--timeout", "1", FOREVER)
    line = assert_one_line_error(done)
    assert "timed out after 1 s" in line and "--timeout" in line, line
    assert done.returncode == 1
    assert digest(db) == before
    rebuild_check(db)


def test_ctrl_c_stops_a_sqlite_query_at_once(db: Path):
    proc = subprocess.Popen(gormes_command(db, "query", "--timeout", "600", FOREVER),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    try:
        _wait_for_sqlite_reader(proc, db)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    assert out == "" and err.splitlines() == ["gormes: interrupted"], err
    rebuild_check(db)


def _wait_for_sqlite_reader(proc: subprocess.Popen, db: Path) -> None:
    """Until the query process has the database file open."""
    fds = Path(f"/proc/{proc.pid}/fd")
    while proc.poll() is None:
        try:
            if any(os.readlink(fd) == str(db) for fd in fds.iterdir()):
                return
        except OSError:
            pass
        time.sleep(0.05)


def test_a_runaway_read_gives_the_wal_back_when_it_times_out(db: Path):
    """While a runaway read holds its snapshot no checkpoint can reset the WAL that
    writers grow; the timeout ends the read, and the WAL can then be emptied."""
    from gormes.events.sqlite_log import SQLiteLog

    with subprocess.Popen(gormes_command(db, "query", "--timeout", "3", FOREVER),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=cli_env()) as reader:
        _wait_for_sqlite_reader(reader, db)
        log = SQLiteLog(db)
        try:
            for n in range(20):
                log.append_now("w", [NoteAdded(text=str(n))])
        finally:
            log.close()
        out, err = reader.communicate(timeout=120)
    assert reader.returncode == 1 and "timed out after 3 s" in err, err
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0
        assert Path(f"{db}-wal").stat().st_size == 0
    finally:
        conn.close()
    count = run_gormes(db, "query", "--json", "SELECT count(*) AS n FROM events")
    assert json_lines(count.stdout) == [{"n": len(SAMPLE) + 20}]
    rebuild_check(db)


def test_ctrl_c_stops_a_postgres_query_at_once(schema: str):
    url = url_for_schema(schema)
    with subprocess.Popen(gormes_command(url, "query", "--timeout", "300",
                                         "SELECT pg_sleep(100) -- attack-sigint"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=cli_env()) as proc:
        try:
            _wait_until_running(proc, "attack-sigint")
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
            _end_on_the_server("attack-sigint")
    assert proc.returncode == 130, err
    assert out == "" and err.splitlines() == ["gormes: interrupted"], err


# --- own attacks on SQLite: writing another file, loading code, editing the schema ---


@pytest.mark.parametrize(
    "sql",
    [
        "VACUUM INTO '{out}'",
        "ATTACH DATABASE '{out}' AS other",
        "SELECT load_extension('{out}')",
        "PRAGMA writable_schema = 1",
    ],
)
def test_sqlite_cannot_write_another_file_or_load_code(db: Path, tmp_path: Path, sql: str):
    out = tmp_path / "written"
    before = digest(db)
    done = run_gormes(db, "query", sql.format(out=out))
    assert_one_line_error(done)
    assert done.returncode == 2
    assert not out.exists()
    assert digest(db) == before


# --- hole 12: a password in any form of the URL is never printed ---


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres:{pw}@127.0.0.1:1/test",
        "postgresql://postgres@127.0.0.1:1/test?password={pw}",
        "postgresql://postgres@127.0.0.1:1/test?sslmode=disable&password={pw}&connect_timeout=2",
        "postgresql://postgres@127.0.0.1:1/test?sslpassword={pw}",
        "postgresql://postgres@127.0.0.1:1/test?PassWord={pw}",
        "postgresql://postgres@127.0.0.1:1/test?password=%7B{pw}%7D",
        "postgres://postgres:{pw}@127.0.0.1:1/test?password={pw}",
    ],
)
def test_a_password_in_the_url_is_never_printed(url: str, tmp_path: Path):
    secret = "s3cr3tHUNTER2"
    done = subprocess.run(gormes_command(url.format(pw=secret), "query", "SELECT 1"),
                          capture_output=True, text=True, env=cli_env(), timeout=60, cwd=tmp_path)
    line = assert_one_line_error(done)
    assert "cannot connect" in line, line
    assert secret not in done.stderr and secret not in done.stdout


def test_redact_masks_every_form():
    from gormes.events.postgres_schema import redact

    secret = "s3cr3t"
    forms = [
        f"postgresql://u:{secret}@h/db",
        f"postgresql://u@h/db?password={secret}",
        f"postgresql://u@h/db?sslpassword={secret}&sslmode=require",
        f"postgresql://u@h/db?a=1&password={secret}#frag",
        f"postgresql://u@h/db?password=%73{secret[1:]}",
        f"host=h user=u password={secret} dbname=db",
        f"host=h password='{secret} with space' dbname=db",
        f"host=h sslpassword = {secret}",
        f"postgresql://u:{secret}@h1,h2:5433/db?password={secret}",
        f"postgresql://u@h/db?password={secret}&password={secret}",
    ]
    for form in forms:
        shown = redact(form)
        assert secret not in shown and "s3cr" not in shown, (form, shown)
        assert "***" in shown, (form, shown)
    assert redact("postgresql://u@h/db?sslmode=require") == "postgresql://u@h/db?sslmode=require"
    assert redact("host=h dbname=db") == "host=h dbname=db"



# --- own attacks on PostgreSQL: wide roles, advisory locks, races ---


def url_as(role: str, schema: str) -> str:
    return as_role(url_for_schema(schema), role)


def test_a_role_that_may_write_the_tables_is_refused(schema: str):
    """Own attack: an application role that can write the log (no superuser, no
    CREATEROLE) cannot be used for queries: a DO block could LOCK the log."""
    with login_role(f'GRANT USAGE ON SCHEMA "{schema}" TO {{role}}',
                    f'GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA "{schema}" TO {{role}}') as role:
        done = query(url_as(role, schema),
                     "DO $$ BEGIN LOCK TABLE events IN ACCESS EXCLUSIVE MODE; END $$")
        line = assert_one_line_error(done)
        assert f"role {role} may write the tables of schema {schema}" in line, line
        assert "GORMES_QUERY_URL" in line and done.returncode == 2


@pytest.mark.parametrize(
    "grant",
    [
        "GRANT pg_execute_server_program TO {role}",
        "GRANT pg_read_server_files TO {role}",
        # a member of a superuser role may `SET ROLE` to it inside its SQL
        "GRANT postgres TO {role}",
    ],
)
def test_a_named_reader_that_could_reach_the_server_is_refused(schema: str, grant: str, tmp_path: Path):
    """Own attack: GORMES_QUERY_URL names a role that looks harmless but can run
    programs, read server files, or switch to a superuser."""
    marker = tmp_path / "ran"
    with login_role(f'GRANT USAGE ON SCHEMA "{schema}" TO {{role}}',
                    f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {{role}}', grant) as role:
        env = {**cli_env(), "GORMES_QUERY_URL": url_as(role, schema)}
        sql = f"DO $$ BEGIN SET ROLE postgres; EXECUTE 'COPY (SELECT 1) TO PROGRAM ''touch {marker}'''; END $$"
        done = query(url_for_schema(schema), sql, env=env)
        line = assert_one_line_error(done)
        assert "gormes query runs only as a read-only role" in line, line
    assert not marker.exists()


def test_a_named_reader_is_used_and_its_password_never_shown(schema: str):
    with login_role(f'GRANT USAGE ON SCHEMA "{schema}" TO {{role}}',
                    f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {{role}}') as role:
        env = {**cli_env(), "GORMES_QUERY_URL": url_as(role, schema)}
        done = query(url_for_schema(schema), "--json", "SELECT session_user AS s, count(*) AS n FROM events",
                     env=env)
        assert done.returncode == 0, done.stderr
        assert json_lines(done.stdout) == [{"s": role, "n": len(SAMPLE)}]
    secret = "n0tSh0wnEver"
    env = {**cli_env(), "GORMES_QUERY_URL": f"postgresql://reader@127.0.0.1:1/test?password={secret}"}
    done = query(url_for_schema(schema), "SELECT 1", env=env)
    line = assert_one_line_error(done)
    assert "cannot connect" in line and "GORMES_QUERY_URL" in line, line
    assert secret not in done.stderr


def test_an_advisory_lock_does_not_stop_writers_opening_the_store(schema: str):
    """Own attack: advisory locks are open to every role; the lock gormes takes
    while creating a schema must not be one a reader can hold against every
    writer's open for the length of its timeout."""
    url = url_for_schema(schema)
    sql = ("SELECT pg_advisory_lock(hashtext('gormes schema ' || current_schema())), "
           "pg_advisory_xact_lock(hashtext('gormes schema ' || current_schema())), "
           "pg_sleep(100) -- attack-advisory")
    with subprocess.Popen(gormes_command(url, "query", "--timeout", "300", sql),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env()) as attack:
        try:
            _wait_until_running(attack, "attack-advisory")
            appended = append_one(url)
            assert appended.returncode == 0, appended.stderr
            assert attack.poll() is None  # the lock was still held when the write finished
        finally:
            attack.kill()
            _end_on_the_server("attack-advisory")
    assert len(logged_events_of(schema)) == len(SAMPLE) + 1  # the append's audit record aside
    rebuild_check(url)


def test_first_queries_on_a_new_schema_race_safely(schema: str):
    """Own attack: many queries at once on a schema the reader cannot read yet all
    set it up (CREATE ROLE, GRANTs collide without a lock) and all succeed."""
    url = url_for_schema(schema)
    admin(f'CREATE TABLE "{schema}".extra(x int)')  # a table the reader lacks
    procs = [subprocess.Popen(gormes_command(url, "query", "--json", "SELECT count(*) AS n FROM extra"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
             for _ in range(6)]
    results = [(p.communicate(timeout=120), p.returncode) for p in procs]
    for (out, err), code in results:
        assert code == 0, err
        assert json_lines(out) == [{"n": 0}]
    grants = admin("SELECT privilege_type FROM information_schema.role_table_grants "
                   "WHERE grantee = 'gormes_reader' AND table_schema = %s ORDER BY table_name", (schema,))
    assert {g for (g,) in grants} == {"SELECT"}


def test_a_role_that_may_create_roles_but_not_grant_is_refused_in_one_line(schema: str):
    """Own attack: CREATEROLE alone (no ownership of the schema) cannot widen the
    reader's grants; it gets one line, and the reader is not given the schema."""
    with login_role("ALTER ROLE {role} CREATEROLE", f'GRANT USAGE ON SCHEMA "{schema}" TO {{role}}',
                    f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {{role}}') as role:
        done = query(url_as(role, schema), "SELECT count(*) FROM events")
        line = assert_one_line_error(done)
        assert "cannot set up the read-only role gormes_reader" in line, line
        assert "GORMES_QUERY_URL" in line
    assert admin("SELECT count(*) FROM pg_roles WHERE rolname = 'gormes_reader' "
                 "AND has_schema_privilege(oid, %s, 'USAGE')", (schema,)) == [(0,)]
