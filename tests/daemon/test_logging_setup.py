"""Journald-friendly log lines: priority prefixes and no timestamps of our own."""

from __future__ import annotations

import io
import logging
import os
import re
import tempfile

from gormes.logging_setup import setup_logging, syslog_priority, under_journald


def logged(journal: bool) -> str:
    stream = io.StringIO()
    handler = setup_logging(journal=journal, stream=stream)
    try:
        log = logging.getLogger("gormes.daemon")
        log.info("ready")
        log.error("broken\nsecond line")
        log.warning("careful")
        log.debug("hidden at INFO")
    finally:
        logging.getLogger("gormes").removeHandler(handler)
    return stream.getvalue()


def test_journal_lines_carry_syslog_priorities_and_no_timestamps():
    assert logged(journal=True).splitlines() == [
        "<6>gormes.daemon: ready",
        "<3>gormes.daemon: broken",
        "<3>second line",
        "<4>gormes.daemon: careful",
    ]


def test_plain_lines_carry_a_utc_timestamp_and_the_level():
    lines = logged(journal=False).splitlines()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO gormes\.daemon: ready", lines[0])
    assert "ERROR gormes.daemon: broken" in lines[1]


def test_priorities_follow_syslog():
    assert [syslog_priority(level) for level in (50, 40, 30, 20, 10, 5)] == [2, 3, 4, 6, 7, 7]


def test_journal_stream_must_name_our_stderr():
    with tempfile.TemporaryFile("w") as f:
        st = os.fstat(f.fileno())
        assert under_journald(f, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
        assert not under_journald(f, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino + 1}"})
        assert not under_journald(f, {})
        assert not under_journald(f, {"JOURNAL_STREAM": "garbage"})
