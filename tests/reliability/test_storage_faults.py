"""Storage faults: a corrupt config.toml and a database from an older schema version. Each gives a
clear one-line error or upgrades in place, and loses nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta

import duckdb
import pytest
from dagster import DagsterInstance

from cortex_pipelines.brain.loop import Brain
from cortex_pipelines.config import ConfigError, load_settings
from cortex_pipelines.instance import init_home
from cortex_pipelines.llm.offline import OfflineClient
from cortex_pipelines.sensors.inbox import inbox_sensor
from cortex_pipelines.storage import Database, bus
from cortex_pipelines.storage.migrations import MIGRATIONS
from tests.support.cli import cortex
from tests.support.inbox import drop, msg
from tests.support.sensors import evaluate

pytestmark = pytest.mark.timeout(120)

CORRUPT = {
    "broken table header": b'llm_provider = "offline"\n[channel_modes\nwebchat = "live"\n',
    "not UTF-8": b"\xff\xfe default_mode = 'live'\n",
    "truncated mid-write": b'default_mode = "li',
}


def _cortex(*args: str, home) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORTEX_", "ANTHROPIC_"))}
    env["CORTEX_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "cortex_pipelines.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("body", list(CORRUPT.values()), ids=list(CORRUPT))
def test_corrupt_config_is_one_clear_line_and_loses_nothing(body, settings, db):
    waiting = drop(settings, "webchat", "a.json", msg("webchat", "Remember the dentist on Monday.", "c-1"))
    (settings.home / "config.toml").write_bytes(body)

    proc = _cortex("status", "--json", home=settings.home)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cortex: config: config.toml is not valid"), proc.stderr

    # The code location still loads (the UI shows it); the sensor's tick fails with the same line
    # and leaves the inbox alone.
    from cortex_pipelines.definitions import defs

    assert defs.resolve_job_def("process_messages") is not None
    broken = pytest.raises(ConfigError, match=r"config\.toml is not valid")
    with DagsterInstance.ephemeral() as instance, broken:
        evaluate(inbox_sensor, instance)
    assert waiting.exists()

    (settings.home / "config.toml").write_text('default_mode = "live"\n')
    status = json.loads(_cortex("status", "--json", home=settings.home).stdout)
    assert sum(status["bus"].values()) == 0  # untouched while the config was broken
    with DagsterInstance.ephemeral() as instance:
        evaluate(inbox_sensor, instance)
    assert not waiting.exists() and db.run(bus.counts)["pending"] == 1


def test_database_from_the_first_schema_version_migrates_and_keeps_its_rows(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    path = home / "cortex.duckdb"
    then = datetime(2026, 1, 5, 9, 30)
    con = duckdb.connect(str(path))  # as version 1 of Cortex left it
    con.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP NOT NULL)")
    for statement in MIGRATIONS[0][1]:
        con.execute(statement)
    con.execute("INSERT INTO schema_version VALUES (1, ?)", [then])
    rows = [
        ("webchat", "old-1", "I moved to Lisbon in March.", "completed"),
        ("telegram", "old-2", "My sister's birthday is on 12 May.", "completed"),
        ("webchat", "old-3", "Remember that I'm vegetarian.", "pending"),
    ]
    for n, (channel, ext, text, state) in enumerate(rows):
        con.execute(
            "INSERT INTO bus (channel, external_id, sender, text, priority, priority_rank, sent_at, "
            "enqueued_at, source, state) VALUES (?, ?, 'maya', ?, 'normal', 1, ?, ?, 'v1', ?)",
            [channel, ext, text, then + timedelta(minutes=n), then + timedelta(minutes=n), state],
        )
    con.execute(
        "INSERT INTO session (bus_id, role, channel, sender, content, ts) "
        "SELECT id, 'user', channel, sender, text, sent_at FROM bus WHERE state = 'completed'"
    )
    con.close()

    settings = load_settings(home)
    init_home(settings)  # what `cortex init` or any command does first
    db = Database(settings.paths.db)
    assert db.schema_version() == MIGRATIONS[-1][0]
    kept = db.query("SELECT external_id, text, state FROM bus ORDER BY id")
    assert kept == [(ext, text, state) for _, ext, text, state in rows]
    assert db.query("SELECT count(*) FROM session WHERE role = 'user'")[0][0] == 2

    report = Brain(db, settings, OfflineClient()).drain()
    assert (report.processed, report.completed) == (1, 1)
    assert db.run(bus.counts)["completed"] == 3
    status = json.loads(_cortex("status", "--json", home=home).stdout)
    assert status["bus"]["completed"] == 3


def test_a_full_disk_keeps_the_last_good_files_and_publishes_once_space_is_back(
    settings, db, tmp_path, monkeypatch
):
    from tests.support.published import CONVERSATION, ingest_recent_history, materialize_all, published_bytes

    ingest_recent_history(settings, db, tmp_path, CONVERSATION)
    with DagsterInstance.ephemeral() as instance:
        materialize_all(settings, instance)
        before = published_bytes(settings)
        db.run(lambda con: con.execute("UPDATE facts SET text = text || ' Really.'"))

        def disk_full(fd):  # the data went to the page cache; flushing it to disk fails
            raise OSError(28, "No space left on device")

        with monkeypatch.context() as patch:
            patch.setattr(os, "fsync", disk_full)
            degraded = materialize_all(settings, instance)  # warnings, not a failed run
        assert published_bytes(settings) == before
        assert not [p.name for p in settings.paths.out.iterdir() if p.name.endswith(".tmp")]
        meta = degraded.asset_materializations_for_node("memory_bulletin")[0].metadata
        assert meta["written"].value is False and "No space left on device" in meta["error"].value

        materialize_all(settings, instance)  # space is back: the change is published, nothing lost
    after = published_bytes(settings)
    assert after["memory_bulletin"] != before["memory_bulletin"] and b"Really." in after["memory_bulletin"]


def test_a_message_the_store_fails_on_fails_for_good_with_the_stores_error(tmp_path):
    """A store's error ends the run (the next one takes the message again); after the last attempt
    the message failed with only "the processing run died on this message 3 time(s)", hiding the
    DuckDB error that killed each run, in `cortex retry` and the failed-messages check."""
    home = tmp_path / "home"
    cortex("send", "webchat", "hello there", home=home)
    con = duckdb.connect(str(home / "cortex.duckdb"))
    con.execute("DROP TABLE turn_vectors")  # where the brain records the turn's vectors
    con.close()
    for _ in range(3):
        assert cortex("run", home=home, check=False).returncode == 1
    cortex("run", home=home, check=False)  # its start-up fails the message that killed three runs
    (failed,) = json.loads(cortex("retry", "--json", home=home).stdout)
    assert failed["error"].startswith("interrupted: the processing run died on this message 3 time(s)")
    assert "(last: CatalogException: Catalog Error: Table with name turn_vectors" in failed["error"]
