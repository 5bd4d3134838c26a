"""The dashboard's reads run on both backends: `store` is an SQLite file, then a
fresh PostgreSQL schema (skipped, with the reason, when the server is down)."""

from pg_helpers import backend, store_on_both_backends  # noqa: F401 (fixtures)
