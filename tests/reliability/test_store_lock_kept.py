"""DuckDB's lock on its file stays with the process that holds it. The day's backup is copied by the
first process to open the database that day, while the sensor, a run or a CLI command may be
writing: their writes wait for the file and are kept. An erasure swaps in a rewritten file only
when nothing, in its own process either, has the old one open."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from cortex_pipelines.config import load_settings
from cortex_pipelines.ingest.inbox import ingest_message
from cortex_pipelines.instance import init_home
from cortex_pipelines.storage import Database, backup
from cortex_pipelines.storage.backup import BackupError

# A connector's message arriving through the gateway's ingest, from a process of its own.
GATEWAY_INGEST = """
import sys
from cortex_pipelines.config import load_settings
from cortex_pipelines.ingest.inbox import ingest_message
from cortex_pipelines.storage import Database
settings = load_settings()
print("ingesting", flush=True)
print(ingest_message(sys.argv[1].encode(), settings, Database(settings.paths.db), "gateway")[0], flush=True)
"""


def _envelope(external_id: str, text: str) -> bytes:
    message = {"channel": "webchat", "sender": "maya", "external_id": external_id, "text": text}
    return json.dumps(message).encode()


def test_a_message_taken_in_while_the_days_backup_is_copied_is_kept(tmp_path):
    home = tmp_path / "home"
    settings = load_settings(home)
    init_home(settings)
    db = Database(settings.paths.db)
    ingest_message(_envelope("w-1", "Remember the blue notebook."), settings, db, "test")

    held = db._attach()  # the file held between transactions, as migrate() holds it around the backup
    try:
        taken = db.back_up()
        plumber = _envelope("w-2", "The plumber comes on Tuesday.").decode()
        writer = subprocess.Popen(
            [sys.executable, "-c", GATEWAY_INGEST, plumber],
            env={**os.environ, "CORTEX_HOME": str(home)},
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout.readline().strip() == "ingesting"
        time.sleep(3)  # time enough for the other process to take the file, were it free
        ingest_message(_envelope("w-3", "Book the train to Porto."), settings, db, "test")  # this one too
    finally:
        db._detach(held)
    assert writer.wait(timeout=90) == 0

    texts = dict(db.query("SELECT external_id, text FROM bus ORDER BY id"))
    assert texts == {
        "w-1": "Remember the blue notebook.",
        "w-2": "The plumber comes on Tuesday.",
        "w-3": "Book the train to Porto.",
    }
    assert backup.verify(taken) >= 1


# Another process attaching the file: prints "taken", or DuckDB's error.
ATTACH_PROBE = """
import sys, duckdb
try:
    duckdb.connect(":memory:").execute("ATTACH ? AS db", [sys.argv[1]])
    print("taken")
except duckdb.Error as exc:
    print(exc)
"""


def _another_process_attaching(path) -> str:
    probe = subprocess.run([sys.executable, "-c", ATTACH_PROBE, str(path)], capture_output=True, text=True)
    return probe.stdout.strip() or probe.stderr.strip()


def test_an_erasures_rewrite_waits_while_another_task_of_its_process_has_the_file(tmp_path):
    """The turn-retention sensor erases in the code server, where another sensor's tick may hold the
    file: the swap must wait for it, and the file must stay locked against other processes."""
    home = tmp_path / "home"
    settings = load_settings(home)
    init_home(settings)
    db = Database(settings.paths.db)
    ingest_message(_envelope("w-1", "Remember the blue notebook."), settings, db, "test")
    before = db.path.stat().st_ino

    held = db._attach()  # another thread's transaction, or a burst, in the same process
    try:
        with pytest.raises(BackupError, match="stayed in use"):
            db.rewrite(wait_s=0.5)
        assert db.path.stat().st_ino == before  # not swapped under the holder
        assert "Could not set lock" in _another_process_attaching(db.path)  # the holder's lock stands
    finally:
        db._detach(held)
    assert _another_process_attaching(db.path) == "taken"

    db.rewrite()
    assert db.path.stat().st_ino != before
    assert db.query("SELECT external_id FROM bus") == [("w-1",)]
