"""`jobs_capped_owned` and `inbox_order` (decision 0076's addendum): a gateway's or
child agent's `job.list` is a range of its own entries of an index, walked in order
from its cursor, and reads no one else's job, however many the operator's are; a
job's inbox page is a range of `inbox_order`. On both backends the plan of every
statement the page runs names the index, with no sort; an older ledger gets both
indexes when a queue opens it."""

from __future__ import annotations

from typing import Any

import pytest

from gormes.actors.jobs.queue import JobQueue
from gormes.actors.jobs.views import select_inbox_page, select_job_page
from gormes.errors import StoreReadOnly
from gormes.events.jobs import JobOptions, Submitter
from gormes.projections import ledger

GATEWAY = Submitter(trust="gateway", caller="mcp:a", scope="chat:mcp-a")
OTHER_GATEWAY = Submitter(trust="gateway", caller="mcp:b", scope="chat:mcp-b")
UNSCOPED = Submitter(trust="gateway", caller="mcp:c")  # a gateway recorded without a scope
CHILD = Submitter(trust="child-agent", caller="run-r1", scope="project:default")
OPERATOR = Submitter(trust="operator", caller="cli")
INDEX = "jobs_capped_owned"
OPERATORS = 600  # enough that PostgreSQL's planner, with statistics, would rather not read them


def owner(s: Submitter) -> tuple[str, str | None]:
    return s.trust, s.scope


class Recording:
    """A connection that keeps the SQL run through it, so that a test asks the
    database for the plan of exactly the statements the code ran."""

    def __init__(self, tx: Any) -> None:
        self.tx = tx
        self.dialect = getattr(tx, "dialect", "sqlite")
        self.statements: list[tuple[str, tuple]] = []

    def execute(self, sql: str, params: tuple = ()) -> Any:
        self.statements.append((sql, tuple(params)))
        return self.tx.execute(sql, params)


def plans(tx: Any, read: Any) -> tuple[Any, list[str]]:
    """`read(conn)`'s answer, and the database's plan of each statement it ran."""
    recording = Recording(tx)
    answer = read(recording)
    out = []
    for sql, params in recording.statements:
        if recording.dialect == "postgres":
            rows = tx.execute(f"EXPLAIN {sql}", params).fetchall()
            out.append("\n".join(r[0] for r in rows))
        else:
            out.append("\n".join(r[3] for r in tx.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()))
    return answer, out


async def fill(store: Any, queue: JobQueue) -> dict[str, list[str]]:
    """Everyone's jobs, the operator's the newest and most; the ids of each owner's,
    newest first."""
    ids: dict[str, list[str]] = {}

    def submit_all(tx: Any) -> None:
        at = 1_000_000
        for s, n in ((GATEWAY, 5), (OTHER_GATEWAY, 2), (UNSCOPED, 2), (CHILD, 2), (OPERATOR, OPERATORS)):
            for i in range(n):
                at += 1
                queue_name = "other" if i % 2 else "default"
                job = queue.submit_in(tx, at, "echo" if i % 3 else "report", {"n": i},
                                      JobOptions(queue=queue_name), submitter=s)
                ids.setdefault(s.caller, []).insert(0, job.id)

    await store.transact(submit_all)
    if getattr(store, "dialect", "sqlite") == "postgres":
        await store.transact(lambda tx: tx.execute("ANALYZE jobs"))
    return ids


def page_plans(tx: Any, who: Submitter, **query: Any) -> tuple[Any, list[str]]:
    args = {"status": None, "queue": None, "name": None, **query}
    return plans(tx, lambda conn: select_job_page(
        conn, args["status"], args["queue"], args["name"], args.get("limit", 2), owner(who),
        before=args.get("before"), max_bytes=1 << 20))


def assert_reads_the_index(store: Any, plan_texts: list[str]) -> None:
    for plan in plan_texts:
        if getattr(store, "dialect", "sqlite") == "postgres":
            assert f"Index Scan Backward using {INDEX}" in plan, plan
            assert "Sort" not in plan, plan
        else:
            assert f"SEARCH jobs USING INDEX {INDEX}" in plan, plan
            assert "TEMP B-TREE" not in plan, plan


async def test_an_owners_page_is_a_range_of_its_own_index_entries(store):
    queue = await JobQueue.open(store)
    ids = await fill(store, queue)
    first, plan = await store.transact(lambda tx: page_plans(tx, GATEWAY))
    assert [j.id for j in first.jobs] == ids["mcp:a"][:2] and first.more
    assert_reads_the_index(store, plan)
    last = first.jobs[-1]
    second, plan = await store.transact(lambda tx: page_plans(tx, GATEWAY, before=(last.created_at, last.id)))
    assert [j.id for j in second.jobs] == ids["mcp:a"][2:4] and second.more
    assert_reads_the_index(store, plan)
    # The filters a list takes are tested on the owner's entries alone.
    for query in ({"status": "waiting"}, {"queue": "other"}, {"name": "report"},
                  {"status": "waiting", "queue": "default", "before": (last.created_at, last.id)}):
        _, plan = await store.transact(lambda tx, query=query: page_plans(tx, GATEWAY, **query))
        assert_reads_the_index(store, plan)
    # A child agent reads its own the same way.
    page, plan = await store.transact(lambda tx: page_plans(tx, CHILD, limit=5))
    assert [j.id for j in page.jobs] == ids[CHILD.caller] and not page.more
    assert_reads_the_index(store, plan)
    # An owner with no scope (`IS NULL`: no operation records one for these classes,
    # a Python caller may) reads its own entries too; PostgreSQL sorts them, as its
    # planner does not take `IS NULL` for an equality that orders the rest.
    page, plan = await store.transact(lambda tx: page_plans(tx, UNSCOPED, limit=5))
    assert [j.id for j in page.jobs] == ids[UNSCOPED.caller] and not page.more
    assert all(INDEX in p for p in plan), plan


async def test_an_owners_pages_list_its_own_jobs_and_no_one_elses(store):
    queue = await JobQueue.open(store)
    ids = await fill(store, queue)
    listed, before = [], None
    while True:
        page = await queue.list_page(owner=owner(GATEWAY), limit=2, before=before, max_bytes=1 << 20)
        listed += [j.id for j in page.jobs]
        if not page.more:
            break
        before = (page.jobs[-1].created_at, page.jobs[-1].id)
    assert listed == ids["mcp:a"]
    waiting_other = await queue.list_page(owner=owner(GATEWAY), queue="other", limit=10, max_bytes=1 << 20)
    assert [j.id for j in waiting_other.jobs] == ids["mcp:a"][::-1][1::2][::-1]


async def test_the_operators_list_does_not_read_the_index(store):
    """The uncapped classes' jobs are not in it: an owner of those classes (nothing
    lists as one but tests) is read from the table, so its list is exact."""
    queue = await JobQueue.open(store)
    await fill(store, queue)
    page, plan = await store.transact(lambda tx: page_plans(tx, OPERATOR, limit=3))
    assert len(page.jobs) == 3 and all(j.submitter == OPERATOR for j in page.jobs)
    assert all(INDEX not in p for p in plan), plan


async def test_an_inbox_page_is_a_range_of_inbox_order(store):
    queue = await JobQueue.open(store)
    other = await queue.submit("echo", None)
    await queue.send(other.id, "not this job's", sender="operator")
    job = await queue.submit("echo", None)
    # A long inbox (what a page is for), so that PostgreSQL's planner, with
    # statistics, would rather not read it whole either.
    sent = [(await queue.send(job.id, {"n": n}, sender="operator")).id for n in range(400)]
    if getattr(store, "dialect", "sqlite") == "postgres":
        await store.transact(lambda tx: tx.execute("ANALYZE inbox"))
    first, plan = await store.transact(lambda tx: plans(
        tx, lambda conn: select_inbox_page(conn, job.id, 2, max_bytes=1 << 20)))
    assert [m.id for m in first.messages] == sent[:2] and first.more
    last = first.messages[-1]
    rest, plan_after = await store.transact(lambda tx: plans(
        tx, lambda conn: select_inbox_page(conn, job.id, 10, after=(last.sent_at, last.id), max_bytes=1 << 20)))
    assert [m.id for m in rest.messages] == sent[2:12] and rest.more
    for statements in (plan, plan_after):
        if getattr(store, "dialect", "sqlite") == "postgres":
            # The sizes are read in order from the cursor, up to the LIMIT; the rows
            # then between the first and the last sized (both ends bounded: the
            # planner may sort that span, the page's rows and no more).
            sizes, span = statements
            assert "Index Scan using inbox_order" in sizes and "Sort" not in sizes, sizes
            assert "inbox_order" in span, span
        else:
            [p] = statements
            assert "SEARCH inbox USING INDEX inbox_order" in p and "TEMP B-TREE" not in p, p


async def test_given_a_ledger_made_before_the_indexes_when_a_queue_opens_it_then_they_are_built(store, reopen):
    # given a ledger with jobs in it, as a gormes before the indexes left it
    queue = await JobQueue.open(store)
    ids = await fill(store, queue)

    def as_before(tx: Any) -> None:
        tx.execute(f"DROP INDEX {INDEX}")
        tx.execute("DROP INDEX inbox_order")
        tx.execute("CREATE INDEX inbox_job ON inbox(job_id, sent_at)")

    await store.transact(as_before)
    _, plan = await store.transact(lambda tx: page_plans(tx, GATEWAY))
    assert all(INDEX not in p for p in plan)
    # (opened read-only, where it cannot be built, such a ledger is refused)
    with pytest.raises(StoreReadOnly, match="not set up for this gormes: open it once where it can be written"):
        await store.transact(lambda tx: ledger.check_current(tx, "the database"))
    # when a queue opens the database again (another process, say)
    async with reopen(store) as again:
        await JobQueue.open(again)
        if getattr(again, "dialect", "sqlite") == "postgres":
            await again.transact(lambda tx: tx.execute("ANALYZE jobs"))
        # then the index is there, holding the jobs recorded before it, and read
        page, plan = await again.transact(lambda tx: page_plans(tx, GATEWAY, limit=10))
        assert [j.id for j in page.jobs] == ids["mcp:a"]
        assert_reads_the_index(again, plan)
        names = await again.transact(lambda tx: {
            r[0] for r in tx.execute(
                "SELECT name FROM sqlite_master" if getattr(again, "dialect", "sqlite") == "sqlite"
                else "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()").fetchall()})
        assert "inbox_order" in names and "inbox_job" not in names


@pytest.mark.parametrize("name", ["sqlite", "postgres"])
def test_the_index_says_the_owner_as_the_list_does(name: str) -> None:
    """A partial index is used only by a query that says its WHERE: the index's DDL
    and the list's terms are written from the same terms."""
    [index] = [i for i in ledger.INDEXES if i.name == INDEX]
    ddl = ledger.index_sql(index, name)
    assert ledger.TRUST not in ddl and ledger.SCOPE not in ddl
    columns = f"{ledger.submitter_scope(name)}, {ledger.submitter_trust(name)}, created_at, id"
    assert ddl.endswith(f"({columns}) WHERE {ledger.capped(name)}")


async def test_a_max_waiting_count_of_an_owner_still_reads_the_classs_live_jobs(store):
    """`max_waiting` counts an owner's waiting jobs among its class's live ones
    (decision 0076): at most the cap's worth, where the owner's entries here would be
    every job it ever had. SQLite, without statistics, would take the index of two
    equalities; it is told which."""
    from gormes.actors.jobs.session import JobSession

    if getattr(store, "dialect", "sqlite") == "postgres":
        pytest.skip("PostgreSQL's planner weighs the two indexes by its statistics: nothing is told to it")
    queue = await JobQueue.open(store)
    await fill(store, queue)

    def count(tx: Any) -> list[str]:
        recording = Recording(tx)
        JobQueue._newest_waiting_at_max(JobSession(recording, 0), JobOptions(max_waiting=1), owner(GATEWAY))
        return [sql for sql, _ in recording.statements]

    statements = await store.transact(count)
    assert len(statements) == 2  # the count, then the newest (one is waiting: max_waiting 1 is reached)
    for sql in statements:
        [plan] = [r[3] for r in await store.transact(
            lambda tx, sql=sql: tx.execute(f"EXPLAIN QUERY PLAN {sql}", ("default", "gateway", "chat:mcp-a"))
            .fetchall())]
        assert plan.startswith("SEARCH jobs USING INDEX jobs_capped_live"), plan
