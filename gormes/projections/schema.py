"""A projection's tables, described once, built on either database.

    SCHEMA = Schema(
        tables=(Table("streams", {"stream": str, "version": int, ...}, pk="stream",
                      not_null=frozenset({"version"})),),
        indexes=(Index("streams", ("updated_at",)),),
    )

On SQLite `Schema.create` builds them with sqlite-utils (exactly what each
projection's `setup` did before, index names included: sqlite-utils names an
index `idx_<table>_<columns>`); on PostgreSQL it runs DDL generated from the same
description (gormes/projections/ledger_postgres.py: TEXT, BIGINT, DOUBLE
PRECISION), inside the writer's transaction, where DDL is transactional. When
every object exists already it is one catalog query.

A projection with a `schema` attribute runs on both stores; one without runs on
SQLite only, and the runner says so. What has no portable description goes in
`postgres_extra` (PostgreSQL DDL) or the projection's own `setup` (SQLite): memory's
full-text search is FTS5 tables on SQLite and GIN expression indexes on PostgreSQL.

Rows are written with one SQL text for both (`?` placeholders; a
PortableConnection runs it on PostgreSQL). SQLite's `INSERT OR REPLACE` has no
PostgreSQL spelling: `replace_sql` writes the standard upsert that replaces
every column instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from gormes.events.postgres_sql import POSTGRES, dialect_of
from gormes.projections.ledger import Table

__all__ = ["Index", "Schema", "Table", "replace_sql", "schema_of", "supports"]


class Index(NamedTuple):
    table: str
    columns: tuple[str, ...]
    name: str | None = None  # default: the name sqlite-utils gives it

    @property
    def index_name(self) -> str:
        return self.name or f"idx_{self.table}_{'_'.join(self.columns)}"


class Schema(NamedTuple):
    tables: tuple[Table, ...]
    indexes: tuple[Index, ...] = ()
    # PostgreSQL-only objects, (name, idempotent DDL): e.g. memory's GIN full-text
    # indexes, which stand where SQLite has FTS5 tables (those `setup` makes).
    postgres_extra: tuple[tuple[str, str], ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return (*(t.name for t in self.tables), *(i.index_name for i in self.indexes))

    @property
    def postgres_names(self) -> tuple[str, ...]:
        return (*self.names, *(name for name, _ in self.postgres_extra))

    def create_sqlite(self, db: Any) -> None:
        """Create what is missing with sqlite-utils (a `sqlite_utils.Database`)."""
        for t in self.tables:
            db.table(t.name).create(
                t.columns, pk=t.pk, if_not_exists=True,
                not_null=set(t.not_null) or None, defaults=t.defaults or None,
            )
        for i in self.indexes:
            db.table(i.table).create_index(list(i.columns), index_name=i.name, if_not_exists=True)

    def postgres_statements(self) -> list[str]:
        from gormes.projections.ledger_postgres import index_sql, table_sql

        return [
            *(table_sql(t) for t in self.tables),
            *(index_sql(i.index_name, i.table, i.columns) for i in self.indexes),
            *(statement for _, statement in self.postgres_extra),
        ]

    def create_postgres(self, conn: Any) -> None:
        """Create what is missing (`conn`: the transaction's PortableConnection)."""
        from gormes.projections.ledger_postgres import present_relations

        if not present_relations(conn).issuperset(self.postgres_names):
            for statement in self.postgres_statements():
                conn.execute(statement)

    def create(self, conn: Any) -> None:
        """On either database, inside the caller's transaction."""
        if dialect_of(conn) == POSTGRES:
            self.create_postgres(conn)
        else:
            import sqlite_utils

            self.create_sqlite(
                sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)
            )

    def drop(self, conn: Any) -> None:
        """Drop the tables (their indexes go with them)."""
        cascade = " CASCADE" if dialect_of(conn) == POSTGRES else ""
        for t in self.tables:
            conn.execute(f'DROP TABLE IF EXISTS "{t.name}"{cascade}')


def schema_of(projection: Any) -> Schema | None:
    """The projection's portable description; None for an SQLite-only projection."""
    return getattr(projection, "schema", None)


def supports(projection: Any, store_or_conn: Any) -> bool:
    """Whether the projection runs on this store (every projection runs on SQLite)."""
    return dialect_of(store_or_conn) != POSTGRES or schema_of(projection) is not None


def replace_sql(table: str, columns: Sequence[str], pk: str | Sequence[str], values: str) -> str:
    """`INSERT OR REPLACE` in the SQL both databases share: insert every column, and
    on a key conflict set every other column to the new row's value.

    `values` is the VALUES list's inside, one item per column (`?`, or a constant)."""
    keys = (pk,) if isinstance(pk, str) else tuple(pk)
    sets = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in keys)
    return (
        f"INSERT INTO {table}({', '.join(columns)}) VALUES ({values}) "
        f"ON CONFLICT({', '.join(keys)}) DO UPDATE SET {sets}"
    )
