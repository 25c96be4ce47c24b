"""`open_instance` keeps one connection per event-log file open while the instance is (Dagster's
own opens and closes one for every read and write, about 500 in a one-message `cortex run`). What
that must not change: a file deleted meanwhile is never read through the kept connection, and
nothing stays open once the instance is closed."""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

from dagster import asset, materialize
from sqlalchemy.exc import OperationalError

from cortex_pipelines.storage.dagster_sqlite import open_instance
from cortex_pipelines.storage.run_history import delete_run
from tests.support.cli import cortex


@asset
def note():
    return 1


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    cortex("init", home=home)
    return home / "dagster_home"


def _shard(dagster_home: Path, run_id: str) -> Path:
    return dagster_home / "history" / "runs" / f"{run_id}.db"


def _history_files_open() -> list[str]:
    """This process's open files under any Dagster history folder."""
    names = []
    for fd in os.listdir("/proc/self/fd"):
        with suppress(FileNotFoundError):  # the listing's own descriptor, closed by now
            names.append(os.readlink(f"/proc/self/fd/{fd}"))
    return [name for name in names if "/dagster_home/history/" in name]


def _step_events(instance, run_id: str) -> int | None:
    """How many events the run's file holds; None when its file has no event table (a file
    created afresh, as Dagster's own connection creates one for a deleted run)."""
    try:
        return len(instance.all_logs(run_id))
    except OperationalError:
        return None


def test_a_run_file_deleted_by_another_process_is_not_read_through_the_kept_connection(tmp_path):
    dagster_home = _home(tmp_path)
    with open_instance(dagster_home) as instance:
        run_id = materialize([note], instance=instance).run_id
        assert _step_events(instance, run_id) > 5
        for suffix in ("", "-wal", "-shm"):  # as run-history retention in `cortex dev` deletes it
            Path(f"{_shard(dagster_home, run_id)}{suffix}").unlink(missing_ok=True)
        assert not _step_events(instance, run_id)
        assert materialize([note], instance=instance).success  # the instance goes on working


def test_nothing_stays_open_after_the_instance_closes_and_pruned_runs_are_let_go_at_once(tmp_path):
    dagster_home = _home(tmp_path)
    assert not _history_files_open()
    with open_instance(dagster_home) as instance:
        kept = materialize([note], instance=instance).run_id
        pruned = materialize([note], instance=instance).run_id
        assert any(pruned in name for name in _history_files_open())
        delete_run(instance, pruned)  # what `cortex run`'s run-history retention calls
        assert not any(pruned in name for name in _history_files_open())
        assert not _shard(dagster_home, pruned).exists()
        assert _step_events(instance, kept) > 5
    assert not _history_files_open()


def test_the_write_ahead_log_is_folded_back_when_the_instance_closes(tmp_path):
    """The last connection to close checkpoints: no run's events are left only in its -wal file."""
    dagster_home = _home(tmp_path)
    with open_instance(dagster_home) as instance:
        run_id = materialize([note], instance=instance).run_id
    wal = Path(f"{_shard(dagster_home, run_id)}-wal")
    assert not wal.exists() or wal.stat().st_size == 0
