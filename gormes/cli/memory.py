"""`gormes memory add-fact|add-entity|relate|review|forget|mirror`.

What the operator records here has `manual` provenance (origin: the CLI) and is
trusted. `review ID --promote|--reject` settles an unreviewed relationship or fact;
`mirror --out DIR` writes USER.md and one page per entity (deterministic).
`forget ID` also erases what recorded it from the log (decision 0026).

Every command is one operator-only memory.* operation, run through the audited
executor (gormes/tools/memory_admin.py; decision 0019), its options derived from
the operation's input (gormes/cli/derive.py).
"""

from __future__ import annotations

from typing import Any

import click

from gormes.cli.derive import OperatorCall, Shown, ValueFlag, operation_command, spec_named
from gormes.tools import memory_admin

SCOPE_ENV = "GORMES_SCOPE"

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")

SCOPE = Shown(metavar="SCOPE", envvar=SCOPE_ENV)
SOURCE = Shown(metavar="PATH", aliases=("--source",))  # --source: the name README and tests use


def _echo(value: Any, as_json: bool, text: str) -> None:
    import msgspec

    click.echo(msgspec.json.encode(value).decode() if as_json else text)


def _spec(name: str) -> Any:
    return spec_named(memory_admin.SPECS, name)


@click.group()
def memory() -> None:
    """Add, review, forget and mirror memory (entities, relationships, facts with provenance)."""


@operation_command(memory, "add-fact", _spec("memory.add_fact"), arguments=("text",), shown={
    "supersedes": Shown(metavar="FACT_ID"), "artifact": SOURCE, "scope": SCOPE,
})
@json_option
def add_fact(call: OperatorCall, as_json: bool) -> None:
    """Record a fact."""
    event = call.run()
    _echo(event, as_json, event.fact_id)


@operation_command(memory, "add-entity", _spec("memory.add_entity"), arguments=("name",), shown={
    "aliases": Shown(aliases=("--alias",)), "scope": SCOPE,  # --alias: the name README uses
})
@json_option
def add_entity(call: OperatorCall, as_json: bool) -> None:
    """Record an entity."""
    event = call.run()
    _echo(event, as_json, event.entity_id)


@operation_command(memory, "relate", _spec("memory.relate"), arguments=("subject", "predicate", "object"),
                   shown={"artifact": SOURCE, "scope": SCOPE})
@json_option
def relate(call: OperatorCall, as_json: bool) -> None:
    """Record that SUBJECT PREDICATE OBJECT (e.g. "Ada" "works at" "Acme")."""
    event = call.run()
    _echo(event, as_json, event.relationship_id)


@operation_command(memory, "review", _spec("memory.review"), arguments=("id",), shown={"verdict": Shown(values=(
    ValueFlag("--promote", "promoted"), ValueFlag("--reject", "rejected"),  # the flags README and tests use
))})
@json_option
def review(call: OperatorCall, as_json: bool) -> None:
    """Promote or reject an unreviewed relationship (or fact) by ID."""
    event = call.run()
    _echo(event, as_json, f"{event.target_id} {event.verdict}")


@operation_command(memory, "forget", _spec("memory.forget"), arguments=("id",), shown={
    "scope": Shown(metavar="SCOPE"),
})
@json_option
def forget(call: OperatorCall, as_json: bool) -> None:
    """Forget a fact, relationship or entity: it leaves recall and mirrors, and what
    recorded it is redacted from the log (tombstones; docs/security.md, Erasure)."""
    result = call.run()
    r = result.redaction
    _echo(result, as_json, f"{result.forgotten.target_id} forgotten: {r.redacted} event(s) redacted"
          + (f" in {', '.join(r.streams)}" if r.streams else ""))


# click refuses an --out that is a file before the store is opened
@operation_command(memory, "mirror", _spec("memory.mirror"), shown={
    "out": Shown(metavar="DIR", type=click.Path(file_okay=False)),
})
@json_option
def mirror(call: OperatorCall, as_json: bool) -> None:
    """Write USER.md and one page per entity with its relationships and provenance."""
    result = call.run(jobs=False)  # no job queue: the mirror writes files, no event but its audit record
    _echo(result, as_json, f"{result.pages} pages in {result.out}: {result.written} written, {result.removed} removed")
