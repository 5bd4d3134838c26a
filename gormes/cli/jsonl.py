"""`gormes import FILE|-` and `gormes export`: the log as JSON lines."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from gormes.cli.live_work import live_work_option

from gormes import out_file
from gormes.cli.events import STREAM_HELP, TYPE_HELP
from gormes.cli.params import POSITION

PROGRESS_MIN_EVENTS = 10_000


@click.command("import")
@click.argument("source", metavar="FILE|-")
@click.option("--ignore-versions", is_flag=True,
              help="Append every line at the end of its stream, ignoring its 'version'.")
@live_work_option("Import it even if it brings live work")
@click.option("--json", "as_json", is_flag=True,
              help="Print the result as JSON: imported, first_position, last_position, recorded_at "
                   "(the position of the import's own log.imported record), sha256 (of the file).")
@click.pass_obj
def import_(obj, source: str, ignore_versions: bool, live_work: bool, as_json: bool) -> None:
    """Append events from a JSONL file ('-' for stdin), all of them or none.

    Each line is a JSON object with at least stream, type and data (the shape
    `gormes export` writes); a gzip-compressed file (an archived segment) is read
    as well. The input is streamed in one transaction: a bad line (or one nested
    deeper than 64 levels, refused unread) undoes the whole import, and the first
    bad line is reported by number. A line's 'version', when present,
    must follow its stream's current version, so an export is not imported twice.
    Audit records keep their day and version: a day this database already
    holds records of (a refused import's) takes them on a copy, audit-DAY~1.

    The import records itself on `log-imports` (a `log.imported`: the positions
    it took, the file's name and sha256, who): `gormes audit verify` names the
    audit records it brought as imported, never as sealed here. A file's own
    `log.imported` lines (an export of a log that imported) are left out.

    An import that brings live work is refused unless --live-work is given: a job
    not ended or a cron schedule not removed (a worker runs such a job, and the
    daemon fires such a schedule, with the trust its records name, whoever wrote
    them), a record for a run running here or a budget held here, a decision
    on an approval requested here, or a memory or skill record that vouches for itself (a fact
    recorded as trusted, reviewed or the operator's, a review, a forget, a
    skill's feedback: a person's word on the log the file came from). A gateway's
    unreviewed memory is history.
    """
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.cli import output
    from gormes.cli.ops import operator_call
    from gormes.events.catalog import load_all
    from gormes.tools.log_admin import EventsImportInput

    load_all()
    with _spooled(source) as path:
        result = operator_call(obj, "events.import",
                               EventsImportInput(path=path, name=source, ignore_versions=ignore_versions,
                                                 live_work=live_work),
                               jobs=False)
    if as_json:
        output.write_json_objects([result])
    else:
        left_out = (f"; left out {result.left_out} log.imported record(s) of the log it came from"
                    if result.left_out else "")
        click.echo(
            f"imported {result.imported} events "
            f"(positions {result.first_position}..{result.last_position}){left_out}"
        )


@contextmanager
def _spooled(source: str) -> Iterator[str]:
    """The path of the input: the file itself, or standard input copied to a
    temporary file (so it is streamed from disk, never held in memory)."""
    if source != "-":
        yield str(Path(source).absolute())
        return
    with tempfile.NamedTemporaryFile(prefix="gormes-import-", suffix=".jsonl") as spool:
        shutil.copyfileobj(sys.stdin.buffer, spool, 1 << 20)
        spool.flush()
        yield spool.name


def _read_run(target, run_id: str, children: bool):
    """The run's records from the PostgreSQL store `target` names, read-only."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import trio

    from gormes.events import run_export
    from gormes.events.open import open_store

    async def main():
        async with open_store(target, readonly=True) as store:
            return await store.read_with(
                lambda log: run_export.run_records(log, run_id, children=children)
            )

    return trio.run(main)


@click.command()
@click.argument("run_id", required=False, metavar="[RUN]")
@click.option("--children", is_flag=True,
              help="With RUN: also the runs it spawned, recursively (what `gormes replay --file` needs).")
@click.option("--after", type=POSITION, default=0, metavar="POS",
              help="Only events after this position.")
@click.option("--type", "types", multiple=True, metavar="T", help=TYPE_HELP)
@click.option("--stream", "streams", multiple=True, metavar="S", help=STREAM_HELP)
@click.option("--out", type=click.Path(dir_okay=False, writable=False), default=None,
              metavar="FILE", help="Write to FILE (replaced whole at the end) instead of stdout.")
@click.pass_obj
def export(obj, run_id: str | None, children: bool, after: int, types: tuple[str, ...],
           streams: tuple[str, ...], out: str | None) -> None:
    """Write the log (or part of it) as JSON lines, the shape of `gormes tail --json`.

    Reads one consistent snapshot (the positions up to the head when it began),
    on SQLite or PostgreSQL; --type and --stream take GLOB patterns on both. On a
    terminal, a progress bar on stderr shows how far a large export has got. With RUN: that run's events only (its
    subagents' too with --children), for `gormes import` or `gormes replay --file`.
    """
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.events import jsonl

    if run_id is not None or children:
        return _export_run(obj, run_id, children, after, types, streams, out)

    log = jsonl.open_for_reading(obj.target)
    try:
        head = log.head()
        with ExportProgress(jsonl.count(log, after, head), after) as on_page:
            if out is None:
                jsonl.export(log, sys.stdout.buffer, after, types=types, streams=streams,
                             upto=head, on_page=on_page)
                sys.stdout.buffer.flush()
            else:
                _export_to_file(log, Path(out), after, types, streams, head, on_page)
    finally:
        log.close()


def _export_run(obj, run_id, children, after, types, streams, out) -> None:
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.errors import UserError
    from gormes.events import jsonl, run_export

    if run_id is None:
        raise UserError("--children needs a RUN")
    if after or types or streams:
        raise UserError("RUN exports a whole run: --after, --type and --stream do not apply")
    if obj.url is not None:
        records = _read_run(obj.url, run_id, children)
    else:
        log = jsonl.open_for_reading(obj.db)
        try:
            records = run_export.run_records(log, run_id, children=children)
        finally:
            log.close()
    text = b"".join(jsonl.to_line(r) for r in records)
    if out is None:
        sys.stdout.buffer.write(text)
        sys.stdout.buffer.flush()
        return
    out_file.write_bytes(out, text)


def _export_to_file(log, path: Path, after, types, streams, head, on_page) -> None:
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.events import jsonl

    with out_file.replacing(path) as out:
        jsonl.export(log, out, after, types=types, streams=streams, upto=head, on_page=on_page)


class ExportProgress:
    """A context giving an `on_page(position)` callback: a rich progress bar on a
    terminal's stderr for large exports, nothing otherwise."""

    def __init__(self, total: int, after: int) -> None:
        self.total = total
        self.after = after
        self.bar = None

    def __enter__(self):
        if self.total < PROGRESS_MIN_EVENTS or not sys.stderr.isatty():
            return None
        from rich.console import Console
        from rich.progress import Progress

        self.bar = Progress(console=Console(stderr=True), transient=True)
        self.bar.start()
        task = self.bar.add_task("exporting", total=self.total)
        return lambda position: self.bar.update(task, completed=position - self.after)

    def __exit__(self, *exc_info) -> None:
        if self.bar is not None:
            self.bar.stop()
