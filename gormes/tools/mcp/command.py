"""Which program a stdio MCP server's `command` starts.

A bare name is looked up on the PATH the server runs with (its `env`'s, else
gormes's), as a shell would. When it is not there, the scripts folder of the
Python gormes runs on is tried too: `.venv/bin/gormes` run without activating the
venv has a PATH without `.venv/bin`, where `pip install mcp-server-time` put the
server the README's configuration names.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from collections.abc import Mapping


def resolved(command: str, env: Mapping[str, str]) -> str:
    """`command` as given when it names a path or is found on its PATH; else the
    program of that name in this Python's scripts folder, if there is one there."""
    if os.sep in command or (os.altsep and os.altsep in command):
        return command
    if shutil.which(command, path=env.get("PATH", os.environ.get("PATH", os.defpath))):
        return command
    for folder in dict.fromkeys((sysconfig.get_path("scripts"), os.path.dirname(sys.executable))):
        found = shutil.which(command, path=folder)
        if found:
            return found
    return command
