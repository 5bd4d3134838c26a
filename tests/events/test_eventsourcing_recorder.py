"""The eventsourcing library's own recorder test cases, run against the gormes log.

(Its test module is imported as a module: pytest would otherwise collect the
abstract base classes themselves as tests.)
"""

from __future__ import annotations

import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from uuid import UUID, uuid4

import msgspec
from eventsourcing.persistence import IntegrityError, Notification, StoredEvent, Tracking
from eventsourcing.tests import persistence as es_tests

from gormes.events.notes import NoteAdded
from gormes.events.recorder import (
    GormesApplicationRecorder,
    GormesProcessRecorder,
    GormesTrackingRecorder,
    to_originator_id,
)
from gormes.events.sqlite_log import SQLiteLog


class _TempDatabase:
    recorder_class: type

    def create_recorder(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        recorder = self.recorder_class.open(Path(tmp.name) / "gormes.db")
        self.addCleanup(recorder.close)
        return recorder


class TestApplicationRecorder(_TempDatabase, es_tests.ApplicationRecorderTestCase):
    recorder_class = GormesApplicationRecorder

    def test_insert_subscribe(self) -> None:
        self.optional_test_insert_subscribe()

    def test_subscription_neither_skips_nor_repeats_under_concurrent_writers(self) -> None:
        recorder = self.create_recorder()
        writers, inserts_per_writer, events_per_insert = 4, 100, 5
        total = writers * inserts_per_writer * events_per_insert

        def write() -> list[tuple[UUID, int]]:
            written = []
            for _ in range(inserts_per_writer):
                originator = uuid4()
                versions = range(1, events_per_insert + 1)
                recorder.insert_events([StoredEvent(originator, v, "t", b"") for v in versions])
                written += [(originator, v) for v in versions]
            return written

        def end_when_written(futures: list[Future]) -> None:
            wait(futures)
            recorder.insert_events([StoredEvent(uuid4(), 1, "end", b"")])

        received: list[Notification] = []
        with recorder.subscribe(gt=0) as subscription, ThreadPoolExecutor(writers + 1) as pool:
            futures = [pool.submit(write) for _ in range(writers)]
            # The end marker comes after every write, so a subscription that skipped
            # an event still ends, and fails below rather than waiting forever.
            ender = pool.submit(end_when_written, futures)
            ender.add_done_callback(lambda f: f.exception() and subscription.stop())
            for notification in subscription:
                if notification.topic == "end":
                    break
                received.append(notification)
            written = [pair for future in futures for pair in future.result()]

        self.assertEqual([n.id for n in received], list(range(1, total + 1)))
        self.assertEqual(
            sorted((n.originator_id, n.originator_version) for n in received), sorted(written)
        )

    def test_subscription_with_topics_moves_past_other_events(self) -> None:
        recorder = self.create_recorder()
        originator = uuid4()
        topics = ["even", "odd"]
        events = [StoredEvent(originator, v, topics[v % 2], b"") for v in range(1, 1201)]
        recorder.insert_events(events)
        with recorder.subscribe(gt=None, topics=["even"]) as subscription:
            versions = []
            for notification in subscription:
                versions.append(notification.originator_version)
                if notification.originator_version >= 1199:  # the last one either way
                    break
        self.assertEqual(versions, list(range(2, 1201, 2)))

    def test_shares_the_gormes_log(self) -> None:
        recorder = self.create_recorder()
        recorder.log.append_now("notes-1", [NoteAdded(text="hi")], expected_version=0)
        with self.assertRaises(IntegrityError):
            recorder.insert_events([StoredEvent("notes-1", 1, "note.added", b"{}")])
        [ours] = recorder.select_events("notes-1")
        self.assertEqual((ours.originator_id, ours.topic), ("notes-1", "note.added"))
        self.assertEqual(msgspec.json.decode(ours.state)["text"], "hi")

        [position] = recorder.insert_events([StoredEvent("notes-1", 2, "es.topic", b"x")])
        record = recorder.log.read_stream("notes-1", after_version=1)[0]
        self.assertEqual((record.position, record.version, record.type), (position, 2, "es.topic"))

    def test_inline_projections_see_recorded_events(self) -> None:
        recorder = self.create_recorder()
        seen = []
        recorder.log.inline.append(lambda conn, records: seen.extend(records))
        ids = recorder.insert_events([StoredEvent("s", v, "t", b"") for v in (1, 2)])
        self.assertEqual([r.position for r in seen], ids)


class TestTrackingRecorder(_TempDatabase, es_tests.TrackingRecorderTestCase):
    recorder_class = GormesTrackingRecorder

    def test_tracking_is_the_gormes_tracking_table(self) -> None:
        recorder = self.create_recorder()
        recorder.insert_tracking(Tracking("upstream", 7))
        with recorder._reading() as conn:
            rows = conn.execute("SELECT projection, position FROM tracking").fetchall()
        self.assertEqual(rows, [("upstream", 7)])


class TestProcessRecorder(_TempDatabase, es_tests.ProcessRecorderTestCase):
    recorder_class = GormesProcessRecorder

    def test_events_and_tracking_commit_together(self) -> None:
        recorder = self.create_recorder()
        recorder.insert_tracking(Tracking("upstream", 5))
        with self.assertRaises(IntegrityError):
            recorder.insert_events(
                [StoredEvent(uuid4(), 1, "t", b"")], tracking=Tracking("upstream", 5)
            )
        self.assertIsNone(recorder.max_notification_id())
        self.assertEqual(recorder.max_tracking_id("upstream"), 5)


def test_originator_ids() -> None:
    uuid = uuid4()
    assert to_originator_id(str(uuid)) == uuid
    assert to_originator_id(str(uuid).upper()) == str(uuid).upper()
    assert to_originator_id(uuid.hex) == uuid.hex
    assert to_originator_id("job-01J0000000000000000000000X") == "job-01J0000000000000000000000X"


def test_a_recorder_on_a_log_it_does_not_own_leaves_it_open(tmp_path: Path) -> None:
    log = SQLiteLog(tmp_path / "gormes.db")
    try:
        recorder = GormesApplicationRecorder(log)
        recorder.insert_events([StoredEvent("s", 1, "t", b"x")])
        recorder.close()
        assert log.head() == 1
    finally:
        log.close()


def test_stop_from_another_thread_ends_a_blocked_subscription(tmp_path: Path) -> None:
    recorder = GormesApplicationRecorder.open(tmp_path / "gormes.db")
    try:
        recorder.insert_events([StoredEvent("s", 1, "t", b"x")])
        received: list[Notification] = []
        got_one = threading.Event()

        def follow() -> None:
            for notification in subscription:
                received.append(notification)
                got_one.set()

        with recorder.subscribe() as subscription:
            follower = threading.Thread(target=follow)
            follower.start()
            got_one.wait()  # the follower is now waiting for a second event
            subscription.stop()
            follower.join()
        assert [n.id for n in received] == [1]
    finally:
        recorder.close()
