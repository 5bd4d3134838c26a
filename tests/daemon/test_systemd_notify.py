"""The sd_notify client against a real datagram socket, path and abstract."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gormes.systemd import Notifier


@pytest.fixture(params=["path", "abstract"])
def listener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if request.param == "path":
        address = str(tmp_path / "notify.sock")
        sock.bind(address)
    else:
        address = f"@gormes-notify-{uuid.uuid4().hex}"
        sock.bind(b"\0" + address[1:].encode())
    sock.settimeout(5)
    yield address, sock
    sock.close()


def test_messages_arrive_as_systemd_expects_them(listener: tuple[str, socket.socket]):
    address, sock = listener
    notifier = Notifier(address, watchdog_usec=3_000_000)
    assert notifier.ready("serving")
    assert sock.recv(4096) == b"READY=1\nSTATUS=serving"
    assert notifier.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert notifier.status("2 active")
    assert sock.recv(4096) == b"STATUS=2 active"
    assert notifier.reloading()
    assert sock.recv(4096).startswith(b"RELOADING=1\nMONOTONIC_USEC=")
    assert notifier.stopping()
    assert sock.recv(4096) == b"STOPPING=1"
    assert notifier.watchdog_interval == 1.5
    notifier.close()


def test_from_environment_reads_and_unsets_the_variables(listener: tuple[str, socket.socket]):
    address, sock = listener
    env = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "400000", "WATCHDOG_PID": str(os.getpid())}
    notifier = Notifier.from_environment(env)
    assert env == {}
    assert notifier.enabled and notifier.watchdog_interval == 0.2
    notifier.ready()
    assert sock.recv(4096) == b"READY=1"
    notifier.close()


def test_a_watchdog_meant_for_another_process_is_ignored(listener: tuple[str, socket.socket]):
    address, _ = listener
    other = os.getpid() + 1
    env = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "400000", "WATCHDOG_PID": str(other)}
    notifier = Notifier.from_environment(env)
    assert notifier.enabled and notifier.watchdog_interval is None
    notifier.close()


def test_without_notify_socket_nothing_is_sent():
    notifier = Notifier.from_environment({"WATCHDOG_USEC": "400000"})
    assert not notifier.enabled
    assert notifier.ready() is False and notifier.watchdog() is False
    assert notifier.watchdog_interval is None


def test_a_missing_socket_is_reported_not_raised(tmp_path: Path):
    notifier = Notifier(str(tmp_path / "gone.sock"))
    assert notifier.ready() is False
    notifier.close()
