"""A home on a file system mounted read-only, through the real `cortex` CLI: every byte is intact,
so every command says so in one line and none advises a restore (QA: each command called the
database damaged, and `cortex doctor --restore` crashed in Dagster's storage with 123 lines)."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import duckdb
import pytest

from cortex_pipelines.config import Paths
from cortex_pipelines.storage import health
from tests.support.cli import cortex
from tests.support.stores import read_only_mount

pytestmark = pytest.mark.timeout(300)

READ_ONLY = "is read-only (nothing is damaged); to repair: remount it read-write"


def _one_line(proc, *needles: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("cortex: ") and all(n in lines[0] for n in needles), lines[0]
    assert "--restore" not in lines[0] and "damaged:" not in lines[0], lines[0]
    return lines[0]


def test_a_read_only_home_is_one_line_for_every_command_and_never_a_restore(tmp_path):
    """A bind mount read-only over the home fails every write with EROFS, as a remount does; it needs
    a mount namespace (root, or unprivileged user namespaces), so the test is skipped without."""
    home = tmp_path / "home"
    cortex("send", "webchat", "I drink green tea every morning.", home=home)
    cortex("status", home=home)  # the day's backup, which the restore would bring back
    wrap = read_only_mount(home)
    if wrap is None:
        pytest.skip("no mount namespace here to mount the home read-only in")
    before = sorted(p.name for p in home.iterdir())

    for args in (("status",), ("recall", "tea"), ("send", "webchat", "x"), ("pin", "gate code 4412")):
        _one_line(
            cortex(*args, home=home, wrap=wrap, check=False), f"the file system holding {home} {READ_ONLY}"
        )

    doctor = cortex("doctor", home=home, wrap=wrap, check=False)
    lines = {line[:18].strip(): line[18:].strip() for line in doctor.stdout.splitlines()}
    assert doctor.returncode == 1 and "--restore" not in doctor.stdout, doctor.stdout
    assert f"the file system holding {home} {READ_ONLY.split(';')[0]}" in lines["duckdb"], lines["duckdb"]
    assert lines["home"].endswith("→ remount its file system read-write"), lines["home"]

    for args in (("doctor", "--restore"), ("doctor", "--restore", "--yes")):
        refused = _one_line(cortex(*args, home=home, wrap=wrap, check=False), f"{home} is read-only")
        assert "nothing is damaged" in refused and "nothing was restored" in refused, refused

    assert sorted(p.name for p in home.iterdir()) == before  # nothing set aside
    cortex("status", home=home)  # writable again, the home opens as it was


@pytest.mark.parametrize(
    "failure",
    [
        lambda db: duckdb.IOException(f'IO Error: Cannot open file "{db}": Read-only file system'),
        lambda db: OSError(errno.EROFS, "Read-only file system", str(db)),
        lambda db: RuntimeError(
            f"lance error: IO error: failed to write {db}: Read-only file system (os error 30)"
        ),
    ],
    ids=["duckdb", "oserror", "lance"],
)
def test_a_read_only_file_system_is_no_damage_in_any_library_s_words(failure, tmp_path):
    """DuckDB says "Cannot open file …: Read-only file system", an IOException, which read as damage."""
    paths = Paths(tmp_path)
    wrapped = RuntimeError("the command failed")
    wrapped.__cause__ = failure(paths.db)
    found = health.as_store_damaged(wrapped, paths)
    assert found is not None and found.store == "the file system holding", found
    assert found.path in (paths.db, paths.home) and found.repair_command == health.REMOUNT
    assert "--restore" not in str(found) and "\n" not in str(found)


def test_the_file_system_named_is_the_home_s_when_the_home_is_read_only(tmp_path, monkeypatch):
    paths = Paths(tmp_path)
    exc = duckdb.IOException(f'IO Error: Cannot open file "{paths.db}": Read-only file system')
    monkeypatch.setattr(health, "on_read_only_file_system", lambda path: Path(path) == paths.home)
    assert health.as_store_damaged(exc, paths).path == paths.home
    # SQLite (Dagster's run storage) only says it cannot open its file: read-only if the home is
    dagster = sqlite3.OperationalError("unable to open database file")
    assert health.as_store_damaged(dagster, paths).store == "the file system holding"
    monkeypatch.setattr(health, "on_read_only_file_system", lambda path: False)
    assert health.as_store_damaged(dagster, paths) is None
