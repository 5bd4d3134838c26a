"""The one `--import MODULE_OR_FILE` option, for every command that runs users'
code (run, worker, daemon, mcp, ops, replay, fork, runs resume, doctor); what it
loads is gormes/tools/imports.py `load_imports`. Only click here: a command's
`--help` loads nothing more."""

from __future__ import annotations

import click

IMPORT_HELP = ("Import a dotted module or a .py file first: its operations (@gormes.operation), "
               "run handlers and job handlers; repeatable.")

import_option = click.option("--import", "imports", multiple=True, metavar="MODULE_OR_FILE", help=IMPORT_HELP)
