"""Attacks on holes 4, 7, 8 and 15 of issue 14: getting out of the workspace and
the knowledge root by links and races, stalling the loop with a regex, and
raw OS errors from hostile arguments.

The callers are real: the executor with a gateway (or child-agent) Caller, and
`gormes mcp` through the `mcp` SDK client, whose server process holds a secret
in its environment. The races are real: a thread swaps a directory for a symlink
to the outside thousands of times while the tools read.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import trio
from cli_helpers import REPO, assert_one_line_error, json_lines, run_gormes
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_helpers import CLIENT_NAME, call_ok, call_refused
from ops_helpers import audit_events
from pg_helpers import fresh_schema, url_for_schema

from gormes.errors import UserError
from gormes.events.open import open_store
from gormes.tools.builtin import default_registry
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, InvalidOperationInput, PathOutsideWorkspace

GATEWAY = Caller(trust="gateway", id="mcp:attacker")
CHILD = Caller(trust="child-agent", id="run-1", run_id="run-1")
SECRET = "hunter2-the-outside-secret"
ENV_SECRET = "sk-live-the-servers-api-key-0451"


pytestmark = pytest.mark.usefixtures("isolated_knowledge")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    place = tmp_path / "outside"
    (place / "sub").mkdir(parents=True)
    for name in ("secret.md", "secret.txt", "sub/secret.md", "only-outside.txt"):
        (place / name).write_text(f"# Secret\n\n{SECRET}\n")
    return place


@pytest.fixture
def workspace(tmp_path: Path, outside: Path) -> Path:
    """A workspace whose knowledge root (`.writ`) is full of links out."""
    ws = tmp_path / "ws"
    writ = ws / ".writ"
    (writ / "decisions").mkdir(parents=True)
    (writ / "decisions" / "db.md").write_text("# Database\n\nWe chose SQLite.\n")
    (writ / "env.md").symlink_to("/proc/self/environ")
    (writ / "leak.md").symlink_to(outside / "secret.md")
    (writ / "outdir").symlink_to(outside)
    (writ / "relative-leak.md").symlink_to("../../outside/secret.md")
    (writ / "inside.md").symlink_to("decisions/db.md")
    (ws / "README.md").write_text("hello\n")
    (ws / "up").symlink_to("..")
    return ws


@pytest.fixture
def executor(store, workspace: Path) -> Executor:
    return Executor(default_registry(), store, workspace=workspace)


def everything_under(root: Path) -> str:
    """Every regular file's text under `root`, links not followed."""
    texts = []
    for directory, _dirs, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            if not path.is_symlink():
                texts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(texts)


def index_text(tmp_path: Path) -> str:
    return everything_under(tmp_path / "data") if (tmp_path / "data").exists() else ""


def rebuild_check(db: Path | str) -> None:
    done = run_gormes(db, "projections", "rebuild", "--check")
    assert done.returncode == 0, done.stderr


# -- hole 4: links out of the knowledge root -----------------------------------------------


async def test_knowledge_search_never_reads_or_indexes_a_link_pointing_out(executor, store, tmp_path, db_path):
    for query in (SECRET, "Secret", "PATH", "HOME"):
        answer = await executor.call("knowledge.search", {"query": query, "limit": 50}, GATEWAY)
        assert SECRET not in repr(answer.hits) and "PATH=" not in repr(answer.hits)
        assert {h.path for h in answer.hits} <= {"decisions/db.md", "inside.md"}, answer.hits
    assert SECRET not in index_text(tmp_path) and "PATH=" not in index_text(tmp_path)
    # A link that stays inside the root is followed: the same rule as the fs tools.
    answer = await executor.call("knowledge.search", {"query": "SQLite"}, GATEWAY)
    assert {h.path for h in answer.hits} == {"decisions/db.md", "inside.md"}
    assert {e.outcome for e in await audit_events(store)} == {"ok"}
    rebuild_check(db_path)


@pytest.mark.parametrize("path", ["outdir/planted.md", "outdir/sub/planted.md", "leak.md", "relative-leak.md"])
async def test_knowledge_write_never_writes_through_a_link_out(executor, store, workspace, outside, path):
    before = everything_under(outside)
    with pytest.raises(PathOutsideWorkspace):
        await executor.call("knowledge.write", {"path": path, "text": "# planted"}, CHILD)
    assert everything_under(outside) == before
    assert not (outside / "planted.md").exists() and not (outside / "sub" / "planted.md").exists()
    # written ahead (decision 0062): refused by the handler, once it started
    assert [e.outcome for e in await audit_events(store)] == ["started", "denied"]


@pytest.mark.parametrize("path", ["env.md", "leak.md", "relative-leak.md"])
async def test_knowledge_append_never_copies_a_links_target_into_the_root(executor, workspace, tmp_path, path):
    with pytest.raises(PathOutsideWorkspace):
        await executor.call("knowledge.write", {"path": path, "text": "more", "append": True}, CHILD)
    writ = workspace / ".writ"
    assert (writ / path).is_symlink()
    assert SECRET not in everything_under(writ) and "PATH=" not in everything_under(writ)
    assert SECRET not in index_text(tmp_path)


@asynccontextmanager
async def mcp_server(db: Path | str, workspace: Path, env_extra: dict[str, str]) -> AsyncIterator[Client]:
    """`gormes mcp --workspace WS` with a secret in its environment (what
    /proc/self/environ would hand out)."""
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"),
           "PYTHONPATH": str(REPO), **env_extra}
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "gormes", "--db", str(db), "mcp", "--workspace", str(workspace)],
        env=env, cwd=workspace,
    )
    info = types.Implementation(name=CLIENT_NAME, version="1")
    async with Client(server, client_info=info, read_timeout_seconds=60) as client:
        yield client


@pytest.fixture(params=["sqlite", "postgres"])
def any_db(request: pytest.FixtureRequest, db_path: Path) -> Iterator[str]:
    """The log the MCP server audits into: a SQLite file or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield str(db_path)
        return
    with fresh_schema() as schema:
        yield url_for_schema(schema)


async def test_a_gateway_over_mcp_gets_nothing_from_the_servers_environment(workspace, tmp_path, any_db):
    env = {"GORMES_TEST_API_KEY": ENV_SECRET, "XDG_DATA_HOME": str(tmp_path / "data"),
           "GORMES_GBRAIN": str(tmp_path / "no-such-gbrain")}
    async with mcp_server(any_db, workspace, env) as client:
        for query in (ENV_SECRET, "GORMES_TEST_API_KEY", SECRET):
            found = await call_ok(client, "knowledge__search", query=query, limit=50)
            assert found["hits"] == [], found  # the answer repeats the query, nothing more
        for path in ("up/../../proc/self/environ", "../../../../proc/self/environ", ".writ/env.md",
                     "/proc/self/environ", ".writ/outdir/secret.md"):
            line = await call_refused(client, "fs__read", path=path)
            assert ENV_SECRET not in line and "outside the workspace" in line
        grep = await call_ok(client, "fs__grep", pattern="sk-live|hunter2")
        assert grep["matches"] == []
    assert ENV_SECRET not in index_text(tmp_path)
    async with open_store(any_db) as store:
        outcomes = [e.outcome for e in await audit_events(store)]
    assert outcomes == ["ok"] * 3 + ["denied"] * 5 + ["ok"]
    rebuild_check(any_db)


# -- hole 7: a directory swapped for a symlink while the tools read ------------------------


RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (Linux renameat2): `a` is never missing."""
    if _libc.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), RENAME_EXCHANGE) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno), str(a))


class Swapper(threading.Thread):
    """Swaps `parent/name` between a real directory and a symlink to `target`, atomically."""

    def __init__(self, parent: Path, name: str, target: Path) -> None:
        super().__init__(daemon=True)
        self.parent, self.name, self.target = parent, name, target
        self.stop = threading.Event()
        self.swaps = 0

    def run(self) -> None:
        real, link = self.parent / self.name, self.parent / (self.name + ".link")
        link.symlink_to(self.target)
        while not self.stop.is_set():
            exchange(real, link)  # `name` is a symlink out
            exchange(real, link)  # `name` is a directory again
            self.swaps += 1

    def __enter__(self) -> Swapper:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join()


@pytest.fixture
def racy(tmp_path: Path, outside: Path) -> Path:
    ws = tmp_path / "racy"
    (ws / "d").mkdir(parents=True)
    (ws / "d" / "secret.txt").write_text("inside\n")
    (ws / "d" / "secret.md").write_text("# Inside\n\ninside\n")
    return ws


def escaped(output: Any) -> bool:
    return SECRET in repr(output) or "only-outside" in repr(output)


async def race(executor: Executor, name: str, args: dict[str, Any], caller: Caller, times: int) -> tuple[int, int]:
    """(escapes, answers) over `times` calls; refusals are fine, escapes are not."""
    escapes = answers = 0
    for _ in range(times):
        try:
            output = await executor.call(name, args, caller)
        except (PathOutsideWorkspace, InvalidOperationInput):
            continue
        answers += 1
        escapes += escaped(output)
    return escapes, answers


@pytest.mark.parametrize(("name", "args", "times"), [
    ("fs.read", {"path": "d/secret.txt"}, 3000),
    ("fs.list", {"path": "d"}, 3000),
    ("fs.grep", {"pattern": "inside|hunter2", "path": "d"}, 2000),
    ("fs.grep", {"pattern": "inside|hunter2"}, 2000),
])
async def test_no_race_reads_outside_the_workspace(memory_store, racy, outside, name, args, times):
    executor = Executor(default_registry(), memory_store, workspace=racy)
    with Swapper(racy, "d", outside) as swapper:
        escapes, answers = await race(executor, name, args, GATEWAY, times)
    assert escapes == 0, f"{escapes} of {answers} answers came from outside the workspace"
    assert answers > 0 and swapper.swaps > 0


async def test_no_race_indexes_outside_the_knowledge_root(memory_store, racy, outside, tmp_path):
    writ = racy / ".writ"
    (writ / "d").mkdir(parents=True)
    (writ / "d" / "note.md").write_text("# Inside\n\ninside\n")
    executor = Executor(default_registry(), memory_store, workspace=racy)
    with Swapper(writ, "d", outside):
        escapes, answers = await race(executor, "knowledge.search", {"query": "hunter2 inside"}, GATEWAY, 400)
    assert escapes == 0 and answers > 0
    assert SECRET not in index_text(tmp_path)


async def test_no_race_writes_knowledge_outside_the_root(memory_store, racy, outside):
    writ = racy / ".writ"
    (writ / "d").mkdir(parents=True)
    executor = Executor(default_registry(), memory_store, workspace=racy)
    written = 0
    with Swapper(writ, "d", outside):
        for i in range(400):
            try:
                await executor.call("knowledge.write", {"path": f"d/planted-{i}.md", "text": "# planted"}, CHILD)
            except UserError:  # refused, or the directory vanished mid-write: both fine
                continue
            written += 1
    assert [p.name for p in outside.rglob("*planted*")] == []
    assert [p.name for p in outside.rglob(".*")] == []  # no temporary file either
    assert written > 0


@pytest.fixture
async def memory_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A real SQLite store without fsync per audit event (the races make thousands)."""
    from gormes.events.sqlite import SQLiteEventStore

    monkeypatch.setenv("GORMES_DURABILITY", "normal")
    async with SQLiteEventStore.open(tmp_path / "race.db") as store:
        yield store


# -- hole 8: a catastrophic pattern ----------------------------------------------------------


async def test_a_catastrophic_grep_never_stalls_the_loop(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    # Under a backtracking engine each of these lines takes seconds with the GIL held.
    line = "a" * 40 + "!\n"
    for i in range(24):
        (ws / f"f{i:02}.txt").write_text(line * 40_000)
    executor = Executor(default_registry(), store, workspace=ws)
    ticks = 0
    result: list[Any] = []

    async def grep() -> None:
        result.append(await executor.call("fs.grep", {"pattern": "(a|aa)+$"}, GATEWAY))

    async def heartbeat() -> None:
        nonlocal ticks
        while not result:
            ticks += 1
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(grep)
        nursery.start_soon(heartbeat)
    (out,) = result
    assert (out.matches, out.files_searched) == ([], 24)
    assert ticks >= 20, f"the loop ticked only {ticks} times while the grep ran"


@pytest.mark.parametrize("pattern", [r"(a)\1", r"(?=a)a", r"(?<!b)a"])
async def test_patterns_a_linear_engine_cannot_run_are_refused_in_one_line(executor, store, pattern):
    with pytest.raises(InvalidOperationInput, match="invalid pattern") as refused:
        await executor.call("fs.grep", {"pattern": pattern}, GATEWAY)
    assert "\n" not in str(refused.value)
    (event,) = await audit_events(store)
    assert event.outcome == "invalid"


# -- hole 15: hostile numbers and NUL bytes ------------------------------------------------


@pytest.mark.parametrize(("name", "args"), [
    ("fs.read", {"path": "README.md", "offset": 2**62}),
    ("fs.read", {"path": "README.md", "offset": 2**63}),
    ("fs.read", {"path": "README.md", "offset": 2**64 - 1}),
    ("fs.read", {"path": "READ\0ME.md"}),
    ("fs.list", {"path": "\0"}),
    ("fs.grep", {"pattern": "x", "path": "a\0b"}),
    ("knowledge.write", {"path": "a\0b.md", "text": "x"}),
    ("knowledge.write", {"path": "decisions/\0.md", "text": "x", "append": True}),
    ("knowledge.search", {"query": "sqlite\0"}),
])
async def test_hostile_arguments_are_invalid_input_not_errors(executor, store, workspace, db_path, name, args):
    before = everything_under(workspace)
    try:
        out = await executor.call(name, args, CHILD)
    except InvalidOperationInput as exc:
        assert "\n" not in str(exc)
        outcome = "invalid"
    else:  # answering cleanly is fine too (an offset past the end reads nothing)
        assert name == "fs.read" and out.bytes_read == 0 and out.truncated is False
        outcome = "ok"
    # A NUL in a text field is refused before the handler, so before a write-ahead
    # `started` record (decisions 0062, 0074); each knowledge.write here holds one.
    nul = any(isinstance(value, str) and "\0" in value for value in args.values())
    ahead = ["started"] if name == "knowledge.write" and not nul else []
    assert [e.outcome for e in await audit_events(store)] == ahead + [outcome]
    assert everything_under(workspace) == before
    rebuild_check(db_path)


def test_lone_surrogates_are_invalid_input_to_the_handlers(workspace):
    # JSON (and so an in-process caller's dict) may carry lone surrogates; file
    # names, RE2 and UTF-8 cannot. The wire decoders (msgspec, the MCP SDK) already
    # refuse them, so this checks the handlers' own line of defence.
    from gormes.knowledge import check_query
    from gormes.knowledge.write import write_markdown
    from gormes.tools.fs import compile_pattern, resolve_inside

    refusals = [
        lambda: resolve_inside(workspace, "README\ud800.md"),
        lambda: compile_pattern("\ud800", False),
        lambda: check_query("\ud800"),
        lambda: write_markdown(workspace / ".writ", "x\ud800.md", "x", False),
        lambda: write_markdown(workspace / ".writ", "x.md", "\ud800", False),
    ]
    for refused in refusals:
        with pytest.raises(InvalidOperationInput):
            refused()
    assert not (workspace / ".writ" / "x.md").exists()


def test_hostile_arguments_from_the_cli_are_one_line(db_path, workspace):
    for args in ('{"path": "README.md", "offset": 18446744073709551615}', '{"path": "READ\\u0000ME.md"}'):
        done = run_gormes(db_path, "ops", "call", "--workspace", str(workspace), "fs.read", args)
        if done.returncode != 0:
            assert_one_line_error(done)
            assert done.returncode == 2
        else:
            assert '"bytes_read":0' in done.stdout.replace(" ", "")
    rebuild_check(db_path)


# -- attacks of our own --------------------------------------------------------------------


async def test_a_symlink_fork_bomb_in_the_knowledge_root_is_walked_once(executor, workspace):
    writ = workspace / ".writ"
    (writ / "a").symlink_to(".")
    (writ / "decisions" / "b").symlink_to("..")
    (writ / "loop1.md").symlink_to("loop2.md")
    (writ / "loop2.md").symlink_to("loop1.md")
    answer = await executor.call("knowledge.search", {"query": "SQLite", "limit": 50}, GATEWAY)
    assert sorted(h.path for h in answer.hits) == ["decisions/db.md", "inside.md"]
    with pytest.raises(InvalidOperationInput, match="symlink"):
        await executor.call("fs.read", {"path": ".writ/loop1.md"}, GATEWAY)


async def test_a_fifo_or_device_in_the_workspace_never_blocks_a_read(executor, workspace, store):
    os.mkfifo(workspace / "pipe.txt")
    os.mkfifo(workspace / ".writ" / "pipe.md")
    (workspace / "pipe-link.txt").symlink_to("pipe.txt")
    (workspace / "null-link").symlink_to("/dev/zero")
    for path in ("pipe.txt", "pipe-link.txt"):
        with pytest.raises(InvalidOperationInput, match="not a regular file"):
            await executor.call("fs.read", {"path": path}, GATEWAY)
    with pytest.raises(PathOutsideWorkspace):
        await executor.call("fs.read", {"path": "null-link"}, GATEWAY)
    grep = await executor.call("fs.grep", {"pattern": "hello"}, GATEWAY)
    assert [m.path for m in grep.matches] == ["README.md"]
    answer = await executor.call("knowledge.search", {"query": "SQLite"}, GATEWAY)
    assert answer.hits
    with pytest.raises(InvalidOperationInput, match="not a regular file"):
        await executor.call("knowledge.write", {"path": "pipe.md", "text": "x", "append": True}, CHILD)


async def test_a_hard_link_to_an_outside_file_is_never_written_through(executor, workspace, outside):
    target = outside / "secret.txt"
    try:
        os.link(target, workspace / ".writ" / "hard.md")
    except OSError:
        pytest.skip("hard links are not possible here")
    await executor.call("knowledge.write", {"path": "hard.md", "text": "replaced"}, CHILD)
    assert target.read_text() == f"# Secret\n\n{SECRET}\n"
    assert (workspace / ".writ" / "hard.md").read_text() == "replaced\n"


async def test_a_gateways_grep_over_a_huge_tree_is_bounded(store, tmp_path):
    from gormes.tools.fs import GREP_MAX_FILES

    ws = tmp_path / "huge"
    ws.mkdir()
    for i in range(GREP_MAX_FILES + 5):
        (ws / f"f{i:05}.txt").write_text("x\n")
    executor = Executor(default_registry(), store, workspace=ws)
    out = await executor.call("fs.grep", {"pattern": "nothing-matches"}, GATEWAY)
    assert (out.files_searched, out.truncated) == (GREP_MAX_FILES, True)


async def test_a_dangling_link_is_never_created_through(executor, workspace, outside):
    writ = workspace / ".writ"
    (writ / "new.md").symlink_to(outside / "created.md")
    (writ / "newdir").symlink_to(outside / "created-dir")
    for path in ("new.md", "newdir/x.md"):
        with pytest.raises(PathOutsideWorkspace):
            await executor.call("knowledge.write", {"path": path, "text": "# x"}, CHILD)
    assert not (outside / "created.md").exists() and not (outside / "created-dir").exists()


def test_a_scripted_models_tool_calls_in_a_run_get_nothing_from_outside(workspace, tmp_path, db_path, monkeypatch):
    """`gormes run agent` as a model would try it: links out, `..` into /proc and a
    catastrophic pattern, each answered (refused or empty) in the run's record."""
    monkeypatch.setenv("GORMES_TEST_API_KEY", ENV_SECRET)  # in the run's /proc/self/environ
    calls = [
        {"name": "fs.read", "arguments": {"path": ".writ/env.md"}},
        {"name": "fs.read", "arguments": {"path": "up/ws/../../../../../../proc/self/environ"}},
        {"name": "fs.read", "arguments": {"path": ".writ/outdir/secret.md"}},
        {"name": "fs.grep", "arguments": {"pattern": "(a|aa)+$|sk-live|hunter2"}},
        {"name": "knowledge.search", "arguments": {"query": ENV_SECRET}},
    ]
    script = tmp_path / "model.json"
    script.write_text(json.dumps([{"tool_calls": calls}, {"text": "done"}]))
    ran = run_gormes(db_path, "run", "agent", "--prompt", "look around", "--model", f"scripted:{script}",
                     "--workspace", str(workspace), "--json")
    assert ran.returncode == 0, ran.stderr
    recorded = [e for e in json_lines(run_gormes(db_path, "events", "--json").stdout) if e.get("type") == "run.tool_called"]
    assert [e["data"]["outcome"] for e in recorded] == ["denied", "denied", "denied", "ok", "ok"], recorded
    for event in recorded:
        shown = json.dumps([event["data"].get("result"), event["data"].get("error")])
        assert SECRET not in shown and "PATH=" not in shown
        if event["data"]["operation"] != "knowledge.search":  # whose answer repeats the query
            assert ENV_SECRET not in shown
    assert recorded[3]["data"]["result"]["matches"] == [] and recorded[4]["data"]["result"]["hits"] == []
    rebuild_check(db_path)


# -- the skills directory: links out and FIFOs (found 2026-12-05) ---------------------------


def skill_text(name: str, body: str) -> str:
    return (f"---\nname: {name}\ndescription: A skill for a test.\nstatus: candidate\n"
            f"triggers: [{name} thing]\nexclusions: []\nrequired_skills: []\nevidence: []\n"
            f"status_evidence: Written for a test.\n---\n# {name}\n\n{body}\n")


@pytest.fixture
def skills_with_holes(workspace: Path, outside: Path) -> Path:
    """The workspace's skills: one real, one linked inside, one linked out (to a valid
    SKILL.md holding the secret), and one whose SKILL.md is a FIFO."""
    skills = workspace / "skills"
    (skills / "real").mkdir(parents=True)
    (skills / "real" / "SKILL.md").write_text(skill_text("real", "The real body."))
    (skills / "inner").symlink_to("real")
    (outside / "leak").mkdir()
    (outside / "leak" / "SKILL.md").write_text(skill_text("leak", SECRET))
    (skills / "leak").symlink_to(outside / "leak")
    (skills / "hang").mkdir()
    os.mkfifo(skills / "hang" / "SKILL.md")
    return skills


@pytest.mark.parametrize("caller", [GATEWAY, CHILD])
async def test_the_skill_tools_never_read_a_link_out_nor_wait_on_a_fifo(executor, store, skills_with_holes, caller):
    with trio.fail_after(60):  # a hang guard only: a FIFO opened for reading would block here forever
        listed = await executor.call("skills.list", {"include_candidates": True}, caller)
        assert SECRET not in repr(listed)
        assert sorted(s.name for s in listed.skills) == ["real", "real"]  # `inner` is `real`, linked inside
        read = await executor.call("skills.read", {"name": "real", "include_candidates": True}, caller)
        assert "The real body." in read.body
        with pytest.raises(UserError, match="no skill named 'leak'"):
            await executor.call("skills.read", {"name": "leak", "include_candidates": True}, caller)
    assert SECRET not in repr(await store.read_all())


def test_skills_check_names_the_link_out_and_the_fifo_and_reads_neither(db_path, skills_with_holes):
    done = run_gormes(db_path, "skills", "check", "--skills-dir", str(skills_with_holes))
    assert SECRET not in done.stdout + done.stderr
    assert "leak/SKILL.md" in done.stdout and "a symlink out of the skills directory: not read" in done.stdout
    assert "hang/SKILL.md" in done.stdout and "not a regular file" in done.stdout


async def test_the_database_in_the_workspace_is_never_read_through_fs_tools(tmp_path: Path):
    """An attacker's finding: with the database inside the workspace, a gateway paged
    `fs.read` through `g.db` and read every scope's memory, though `memory.recall`
    of that scope is denied. The store's own files are refused by inode, whatever
    the name or link; the refusal is audited as denied."""
    from gormes.events.sqlite import SQLiteEventStore
    from gormes.ops.spec import OperationDenied

    workspace = tmp_path / "ws"
    workspace.mkdir()
    db = workspace / "g.db"
    async with SQLiteEventStore.open(db) as store:
        executor = Executor(default_registry(), store, workspace=workspace)
        await executor.call("memory.remember", {"fact": f"the vault code is {SECRET}",
                                                "scope": "project:secret"}, Caller(trust="operator", id="cli"))
        (workspace / "linked.txt").symlink_to("g.db")
        os.link(db, workspace / "hard.txt")
        for path in ("g.db", "g.db-wal", "linked.txt", "hard.txt", str(db)):
            with pytest.raises(OperationDenied, match="gormes' own database"):
                await executor.call("fs.read", {"path": path, "max_bytes": 1024 * 1024}, GATEWAY)
        grep = await executor.call("fs.grep", {"pattern": "vault"}, GATEWAY)
        assert grep.matches == []
        (workspace / "notes.txt").write_text("an ordinary file\n")
        assert "ordinary" in (await executor.call("fs.read", {"path": "notes.txt"}, GATEWAY)).content
        refused = [e for e in await audit_events(store) if e.operation == "fs.read" and e.outcome == "denied"]
        assert len(refused) == 5
