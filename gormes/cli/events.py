"""`gormes events` (list events) and `gormes types` (the event types gormes knows)."""

from __future__ import annotations

import click

from gormes.cli.params import INT64_MAX, POSITION

TYPE_HELP = "Only events of this type; a glob such as 'job.*' works. Repeatable."
STREAM_HELP = "Only events of this stream; a glob such as 'job-*' works. Repeatable."


@click.command()
@click.option("--stream", "streams", multiple=True, metavar="S", help=STREAM_HELP)
@click.option("--type", "types", multiple=True, metavar="T", help=TYPE_HELP)
@click.option("--after", type=POSITION, default=0, metavar="POS",
              help="Only events after this position.")
# --limit 0 would print "no events" of a log that has some: refused instead.
@click.option("--limit", type=click.IntRange(min=1, max=INT64_MAX), default=None, metavar="N",
              help="At most N events (1 or more).")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line (the shape of `gormes tail --json`).")
@click.pass_obj
def events(obj, streams: tuple[str, ...], types: tuple[str, ...], after: int,
           limit: int | None, as_json: bool) -> None:
    """List events from the log, oldest first.

    With --json, prints JSON lines: one object per event with position, stream,
    version, type, schema_version, recorded_at (Unix seconds) and data (the
    event's fields as stored). Without it, a table.
    """
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.cli import output
    from gormes.cli.postgres_log import database_url, read_pages
    from gormes.events import jsonl

    url = database_url()
    if url is not None:
        pages = read_pages(url, after, types=types, streams=streams, limit=limit)
        if as_json:
            for page in pages:
                output.write_json_lines(page)
        else:
            output.print_events_table([r for page in pages for r in page])
        return
    log = jsonl.open_for_reading(obj.db)
    try:
        if as_json:
            for page in jsonl.pages(log, after, types=types, streams=streams, limit=limit):
                output.write_json_lines(page)
        else:
            records = jsonl.select(log, after, types=types, streams=streams, limit=limit)
            output.print_events_table(records)
    finally:
        log.close()


@click.command()
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line: type, schema_version, class, fields.")
def types(as_json: bool) -> None:
    """List the event types this gormes knows, with their fields."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import msgspec

    from gormes.cli import output
    from gormes.events.catalog import load_all
    from gormes.events.codec import default_codec

    load_all()
    described = []
    for tag in default_codec.types():
        cls = default_codec.class_for(tag)
        fields = [
            {"name": f.name, "type": _type_name(f.type), "required": f.required}
            for f in msgspec.structs.fields(cls)
        ]
        described.append({
            "type": tag,
            "schema_version": cls.schema_version,
            "class": f"{cls.__module__}.{cls.__qualname__}",
            "fields": fields,
        })
    if as_json:
        output.write_json_objects(described)
        return
    rows = [
        (d["type"], str(d["schema_version"]),
         ", ".join(f["name"] + ("" if f["required"] else "?") + ": " + f["type"]
                   for f in d["fields"]))
        for d in described
    ]
    output.print_rows_table(["type", "schema", "fields (? = optional)"], rows)


def _type_name(annotation: object) -> str:
    if isinstance(annotation, type) and not getattr(annotation, "__args__", None):
        return annotation.__name__
    return str(annotation).replace("typing.", "")
