"""The `store` of the recall tests, on both backends (the pattern of
tests/projections/conftest.py): every test that asks for `store` runs on a
temp-file SQLite database and on the real PostgreSQL server (a fresh schema per
test, dropped afterwards; skipped, with the reason, only when the server cannot
be reached). `backend` says which."""

from __future__ import annotations

from pg_helpers import backend, store_on_both_backends  # noqa: F401 (fixtures)
