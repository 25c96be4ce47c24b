"""A history import and the backups, through the real `cortex` CLI: no backup held an imported
history (the day's was taken before it), so a restore on the day of the import brought back an
empty database, and its words pointed at inbox/.ingested, which never held those messages (QA)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from cortex_pipelines.config import Paths
from cortex_pipelines.storage import backup
from tests.support.cli import cortex

pytestmark = pytest.mark.timeout(300)


def _history(path: Path, count: int, first: int = 0) -> Path:
    path.write_text(
        "".join(
            json.dumps(
                {
                    "channel": "webchat",
                    "sender": "maya",
                    "text": f"Old note {n}: the tea shop on Rua Augusta opens at nine.",
                    "external_id": f"past-{n}",
                    "timestamp": f"2026-01-0{1 + n // 1000}T10:{n // 60 % 60:02d}:{n % 60:02d}Z",
                }
            )
            + "\n"
            for n in range(first, first + count)
        )
    )
    return path


def _completed(home: Path) -> int:
    return json.loads(cortex("status", "--json", home=home).stdout)["bus"]["completed"]


def test_a_history_import_is_backed_up_and_a_restore_on_its_day_keeps_it(tmp_path):
    home = tmp_path / "home"
    db_path = Paths(home).db
    cortex("init", home=home)
    imported = cortex("ingest", "--history", str(_history(tmp_path / "past.jsonl", 300)), home=home)
    (after,) = [p for p in backup.backups(db_path) if p.name.endswith("-after-import.duckdb")]
    assert f"backed up as {after}" in imported.stdout.splitlines()
    assert backup.backups(db_path)[0] == after  # newest, though the day's backup may share its second

    # A second import the same day replaces the first one's copy (it holds those rows too); an import
    # of nothing new takes none.
    cortex("ingest", "--history", str(_history(tmp_path / "more.jsonl", 20, first=300)), home=home)
    again = cortex("ingest", "--history", str(tmp_path / "more.jsonl"), home=home)
    assert "backed up" not in again.stdout
    copies = [p.name for p in backup.backups(db_path) if p.name.endswith("-after-import.duckdb")]
    assert len(copies) == 1 and backup.verify(backup.folder(db_path) / copies[0])

    with open(db_path, "r+b") as fh:  # damaged: every block after DuckDB's headers lost
        fh.truncate(3 * 4096)
    restored = cortex("doctor", "--restore", home=home)
    assert _completed(home) == 320, restored.stdout
    assert any("`cortex ingest --history FILE`" in line for line in restored.stdout.splitlines())


def test_a_restore_names_the_history_import_it_rolls_back_and_the_refusal_counts_it(tmp_path):
    """A backup from before an import (one taken on an older Cortex, or a user's own copy): the
    refusal only said "what was said since the backup"; the restore counted the imported messages as
    coming "by the gateway, an import or a schedule, which keep no file"."""
    home = tmp_path / "home"
    cortex("send", "webchat", "Hello there.", home=home)
    cortex("status", home=home)  # the day's backup (a new database has none), before the import
    (before,) = backup.backups(Paths(home).db)
    shutil.copyfile(before, tmp_path / "mine.duckdb")
    cortex("ingest", "--history", str(_history(tmp_path / "past.jsonl", 30)), home=home)

    refused = cortex("doctor", "--restore", str(tmp_path / "mine.duckdb"), home=home, check=False)
    assert refused.returncode == 2
    assert re.fullmatch(
        r"cortex: the database reads whole: a restore would roll back 30 message\(s\) \(30 of them "
        r"imported as history\) and 0 reply\(ies\) said since mine\.duckdb was taken "
        r"\((just now|\d+ min ago)\); add --yes",
        refused.stderr.strip(),
    ), refused.stderr
    restored = cortex("doctor", "--restore", str(tmp_path / "mine.duckdb"), "--yes", home=home)
    assert (
        "rolled back 30 message(s) and 0 reply(ies) from after the backup; `cortex ingest --history "
        "FILE` brings back the 30 imported as history (from past.jsonl)"
    ) in restored.stdout.splitlines(), restored.stdout
    assert _completed(home) == 0
    cortex("ingest", "--history", str(tmp_path / "past.jsonl"), home=home)
    assert _completed(home) == 30
