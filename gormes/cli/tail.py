"""`gormes tail`: print events line by line; `--follow` keeps printing new ones,
including those other processes append, until SIGINT or SIGTERM (exit 0). With
--follow a database that does not exist yet is waited for, then followed."""

from __future__ import annotations

import signal

import click

from gormes.cli.events import STREAM_HELP, TYPE_HELP
from gormes.cli.params import POSITION

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
WAIT_POLL_S = 0.2  # how often --follow looks for a database that does not exist yet


@click.command()
@click.option("--follow", "-f", is_flag=True,
              help="Keep printing events as they are appended, until interrupted.")
@click.option("--stream", "streams", multiple=True, metavar="S", help=STREAM_HELP)
@click.option("--type", "types", multiple=True, metavar="T", help=TYPE_HELP)
@click.option("--kind", "kinds", multiple=True, metavar="K",
              help="Only audit events of this audit kind (e.g. fs.read, job.write); "
                   "implies --type 'audit.*'. Repeatable.")
@click.option("--after", type=POSITION, default=0, metavar="POS",
              help="Start after this position (default: from the first event).")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line: position, stream, version, type, "
                   "schema_version, recorded_at, data.")
@click.pass_obj
def tail(obj, follow: bool, streams: tuple[str, ...], types: tuple[str, ...],
         kinds: tuple[str, ...], after: int, as_json: bool) -> None:
    """Print events, one per line, flushed as each is written.

    Without --json each line is: position, time, stream and version, type, data.
    With --follow, SIGINT or SIGTERM ends it with exit status 0.
    """
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.cli.postgres_log import database_url, read_pages
    from gormes.events import jsonl

    if kinds and not types:
        types = ("audit.*",)
    keep = jsonl.audit_kind_matcher(kinds)
    url = database_url()
    if follow:
        _follow(url or obj.db, after, types, streams, keep, as_json)
        return
    if url is not None:
        for page in read_pages(url, after, types=types, streams=streams):
            _print([r for r in page if keep(r)], as_json)
        return
    log = jsonl.open_for_reading(obj.db)
    try:
        for page in jsonl.pages(log, after, types=types, streams=streams):
            _print([r for r in page if keep(r)], as_json)
    finally:
        log.close()


def _print(records, as_json: bool) -> None:
    from gormes.cli import output

    if not records:
        return
    if as_json:
        output.write_json_lines(records, flush_each=True)
    else:
        output.print_human_lines(records, flush_each=True)


def _follow(db, after: int, types: tuple[str, ...], streams: tuple[str, ...],
            keep, as_json: bool) -> None:
    # A stop request that arrives before trio listens for it still ends us cleanly.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    import trio

    try:
        trio.run(_follow_until_signalled, db, after, types, streams, keep, as_json)
    except BaseException as exc:  # noqa: BLE001 - sorted out just below
        error = _first_real_error(exc)
        if error is not None:
            raise error from None


async def _follow_until_signalled(db, after: int, types: tuple[str, ...],
                                  streams: tuple[str, ...], keep, as_json: bool) -> None:
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import trio

    from gormes.events.jsonl import STORED_JSON, stream_matcher
    from gormes.events.open import open_store

    wanted = stream_matcher(streams)
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(stop_on_signal)
            if not isinstance(db, str):  # an SQLite path; a URL names a server that is up or not
                await _wait_for_database(db)
            async with open_store(db, readonly=True, codec=STORED_JSON) as store:
                async for record in store.subscribe(after, list(types) or None):
                    if wanted(record.stream) and keep(record):
                        _print([record], as_json)


async def _wait_for_database(path) -> None:
    """Return once `path` is a gormes database, saying once on stderr that we wait.

    A tail started before the daemon (an audit tail under systemd) is normal: a
    missing file, or one its creator has not yet given the schema, is waited for.
    A file that is not ours is refused (check_file raises)."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import trio

    from gormes.events.sqlite_schema import check_file

    said = False
    while not (path.exists() and not check_file(path)):
        if not said:
            click.echo(f"gormes: waiting for {path} to be created", err=True)
            said = True
        await trio.sleep(WAIT_POLL_S)


def _first_real_error(exc: BaseException) -> BaseException | None:
    """What to raise after trio.run failed: None for an interrupt, else the first
    error inside any exception groups (so gormes errors still print as one line)."""
    leaves = list(_leaves(exc))
    if all(isinstance(e, KeyboardInterrupt) for e in leaves):
        return None
    for leaf in leaves:
        if not isinstance(leaf, KeyboardInterrupt):
            return leaf
    return exc  # pragma: no cover


def _leaves(exc: BaseException):
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc
