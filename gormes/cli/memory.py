"""`gormes memory add-fact|add-entity|relate|review|forget|mirror`.

What the operator records here has `manual` provenance (origin: the CLI) and is
trusted. `review ID --promote|--reject` settles an unreviewed relationship or fact;
`mirror --out DIR` writes USER.md and one page per entity (deterministic).

Every command but mirror runs its operator-only memory.* operation through the
audited executor (gormes/tools/memory_admin.py; decision 0019).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gormes.recall.api import DEFAULT_SCOPE

scope_option = click.option("--scope", envvar="GORMES_SCOPE", default=DEFAULT_SCOPE, show_default=True,
                            metavar="SCOPE", help="chat:<id> or project:<id> (env GORMES_SCOPE).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _call(obj: Any, name: str, value: dict[str, Any]) -> Any:
    from gormes.cli.ops import operator_call

    return operator_call(obj, name, value)


def _write(obj: Any, fn: Any) -> Any:
    """Run `fn(writer, store)` against the database, in trio."""
    import trio

    from gormes.events.open import open_store
    from gormes.memory.writer import MemoryWriter

    async def main() -> Any:
        async with open_store(obj.target) as store:  # an SQLite file or a PostgreSQL URL
            return await fn(MemoryWriter(store), store)

    return trio.run(main)


def _echo(value: Any, as_json: bool, text: str) -> None:
    import msgspec

    click.echo(msgspec.json.encode(value).decode() if as_json else text)


@click.group()
def memory() -> None:
    """Add, review, forget and mirror memory (entities, relationships, facts with provenance)."""


@memory.command("add-fact")
@click.argument("text")
@click.option("--subject", help="The entity the fact is about.")
@click.option("--supersedes", multiple=True, metavar="FACT_ID", help="A fact this one replaces (repeatable).")
@click.option("--source", "artifact", metavar="PATH", help="The artifact it comes from (default: cli).")
@click.option("--confidence", type=click.FloatRange(0, 1), default=1.0, show_default=True)
@scope_option
@json_option
@click.pass_obj
def add_fact(obj: Any, text: str, subject: str | None, supersedes: tuple[str, ...], artifact: str | None,
             confidence: float, scope: str, as_json: bool) -> None:
    """Record a fact."""
    event = _call(obj, "memory.add_fact", {"text": text, "subject": subject, "supersedes": list(supersedes),
                                           "artifact": artifact, "confidence": confidence, "scope": scope})
    _echo(event, as_json, event.fact_id)


@memory.command("add-entity")
@click.argument("name")
@click.option("--kind", default="thing", show_default=True, help="person, project, place, tool...")
@click.option("--alias", "aliases", multiple=True, help="Another name (repeatable).")
@scope_option
@json_option
@click.pass_obj
def add_entity(obj: Any, name: str, kind: str, aliases: tuple[str, ...], scope: str, as_json: bool) -> None:
    """Record an entity."""
    event = _call(obj, "memory.add_entity", {"name": name, "kind": kind, "aliases": list(aliases), "scope": scope})
    _echo(event, as_json, event.entity_id)


@memory.command()
@click.argument("subject")
@click.argument("predicate")
@click.argument("object_", metavar="OBJECT")
@click.option("--source", "artifact", metavar="PATH", help="The artifact it comes from (default: cli).")
@click.option("--confidence", type=click.FloatRange(0, 1), default=1.0, show_default=True)
@scope_option
@json_option
@click.pass_obj
def relate(obj: Any, subject: str, predicate: str, object_: str, artifact: str | None, confidence: float,
           scope: str, as_json: bool) -> None:
    """Record that SUBJECT PREDICATE OBJECT (e.g. "Ada" "works at" "Acme")."""
    event = _call(obj, "memory.relate", {"subject": subject, "predicate": predicate, "object": object_,
                                         "artifact": artifact, "confidence": confidence, "scope": scope})
    _echo(event, as_json, event.relationship_id)


@memory.command()
@click.argument("target_id", metavar="ID")
@click.option("--promote", "verdict", flag_value="promoted", help="Accept it: it counts in every scope recall may see.")
@click.option("--reject", "verdict", flag_value="rejected", help="Reject it: it no longer counts anywhere.")
@click.option("--note", default="", help="Why.")
@json_option
@click.pass_obj
def review(obj: Any, target_id: str, verdict: str | None, note: str, as_json: bool) -> None:
    """Promote or reject an unreviewed relationship (or fact) by ID."""
    from gormes.memory.writer import MemoryInputError

    if verdict is None:
        raise MemoryInputError("memory review: give --promote or --reject")
    event = _call(obj, "memory.review", {"id": target_id, "verdict": verdict, "note": note})
    _echo(event, as_json, f"{event.target_id} {event.verdict}")


@memory.command()
@click.argument("target_id", metavar="ID")
@click.option("--reason", default="", help="Why.")
@click.option("--scope", default=None, metavar="SCOPE", help="The entity's scope (entities only).")
@json_option
@click.pass_obj
def forget(obj: Any, target_id: str, reason: str, scope: str | None, as_json: bool) -> None:
    """Forget a fact, relationship or entity: it leaves recall and mirrors; the log keeps it."""
    event = _call(obj, "memory.forget", {"id": target_id, "reason": reason, "scope": scope})
    _echo(event, as_json, f"{event.target_id} forgotten")


@memory.command()
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Directory to write USER.md and entities/ into.")
@json_option
@click.pass_obj
def mirror(obj: Any, out: Path, as_json: bool) -> None:
    """Write USER.md and one page per entity with its relationships and provenance."""
    from gormes.memory.mirror import mirror as write_mirror

    async def go(_: Any, store: Any) -> Any:
        from gormes.projections.memory import memory_projection, read_connection
        from gormes.projections.runner import ProjectionRunner

        await ProjectionRunner(store, memory_projection).catch_up(upto=await store.head())
        return await store.read_with(lambda log: write_mirror(read_connection(log), out))

    result = _write(obj, go)
    _echo(result, as_json, f"{result.pages} pages in {result.out}: {result.written} written, {result.removed} removed")
