"""A lingering drain (brain/linger.py): it answers what arrives while it waits, hands on each batch,
and ends after its idle window or when another process asks for the brain lane."""

from __future__ import annotations

import threading
import time

from cortex_pipelines.brain.linger import Linger
from cortex_pipelines.brain.loop import Brain
from cortex_pipelines.ingest.inbox import ingest_inbox
from cortex_pipelines.llm.offline import OfflineClient
from cortex_pipelines.storage import bus, lease, outbox
from tests.support.inbox import drop, msg


def _later(seconds: float, action) -> threading.Thread:
    def act():
        time.sleep(seconds)
        action()

    thread = threading.Thread(target=act)
    thread.start()
    return thread


def test_a_lingering_drain_answers_a_file_dropped_while_it_waits_then_ends_when_idle(settings, db):
    drop(settings, "webchat", "first.json", msg("webchat", "I prefer window seats", "1"))
    ingest_inbox(settings, db)
    batches = []
    linger = Linger(db, settings, idle_s=2.0, limit_s=60, on_batch=batches.append)
    # No doorbell: a connector only drops the file, and the run ingests it itself.
    dropper = _later(0.5, lambda: drop(settings, "webchat", "second.json", msg("webchat", "and aisle?", "2")))
    started = time.monotonic()
    last = Brain(db, settings, OfflineClient()).drain(linger=linger)
    dropper.join()

    assert [b.processed for b in batches] == [1, 1] and last.processed == 0  # each handed on at once
    assert db.run(bus.counts)["completed"] == 2
    assert len(db.run(outbox.added_after, 0)) == 2
    assert time.monotonic() - started >= 2.0  # waited out its idle window after the second answer
    assert not db.run(lease.holder_alive, settings.lease_timeout_s)  # the lease is released


def test_a_lingering_drain_ends_when_another_process_wants_the_lane(settings, db):
    linger = Linger(db, settings, idle_s=300, limit_s=600)
    asker = _later(0.5, lambda: lease.want_lane(settings.paths.db))
    started = time.monotonic()
    Brain(db, settings, OfflineClient()).drain(linger=linger)
    asker.join()
    assert time.monotonic() - started < 60  # far inside the 300 s idle window
