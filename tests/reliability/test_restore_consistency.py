"""A restored backup leaves nothing of what it rolled back in answers: not in LanceDB when the
rebuild after it never finishes, not in the published files, and not through an idle `cortex dev`
whose sensors start runs on the old vectors (QA, helper-27). Through the real `cortex` CLI and a
real `cortex dev`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cortex_pipelines.memory.embedder import resolve_model_path
from cortex_pipelines.storage import dagster_sqlite
from tests.support.cli import cortex
from tests.support.dagster_dev import cortex_dev, wait_for

pytestmark = pytest.mark.timeout(600)
SECRET = "My locker code is PINEAPPLE-42."


def _home_with_a_message_after_its_backup(tmp_path: Path) -> Path:
    """Two messages answered and indexed, the daily backup taken between them: the second is what a
    restore rolls back."""
    home = tmp_path / "home"
    cortex("send", "webchat", "I live in Lisbon by the river.", home=home)
    cortex("run", home=home)
    shutil.rmtree(home / "backups")
    cortex("status", home=home)  # the day's first command backs up
    cortex("send", "webchat", SECRET, home=home)
    cortex("run", home=home)
    assert "PINEAPPLE" in cortex("recall", "locker code", home=home).stdout
    return home


@pytest.mark.soak  # slow edge case, kept out of CI's 30 minutes: pytest -m soak
def test_a_restore_whose_rebuild_fails_leaves_no_vector_of_what_it_rolled_back(tmp_path):
    """The rebuild after a restore loads the model first (seconds): killed or failing then, the old
    vectors stayed and recall, replies and prompts quoted the rolled-back messages."""
    home = _home_with_a_message_after_its_backup(tmp_path)
    unloadable = tmp_path / "model"
    shutil.copytree(resolve_model_path("all-MiniLM-L6-v2"), unloadable)
    (unloadable / "model.safetensors").unlink()
    failed = cortex(
        "doctor",
        "--restore",
        "--yes",
        home=home,
        check=False,
        env={"CORTEX_EMBEDDING_MODEL": str(unloadable)},
    )
    assert failed.returncode == 1
    assert "restored" in failed.stdout  # the database was brought back, then the rebuild failed
    (line,) = failed.stderr.strip().splitlines()
    assert line.startswith(f"cortex: LanceDB is not rebuilt: the embedding model {unloadable} does not load")

    found = cortex("recall", "locker code", "--json", home=home).stdout
    assert "PINEAPPLE" not in found
    for published in (home / "out").glob("*.md"):
        assert "PINEAPPLE" not in published.read_text(), published.name
    assert "Lisbon" in cortex("recall", "where do I live", home=home).stdout  # read from DuckDB meanwhile
    cortex("run", home=home)  # the next indexing run embeds everything again
    doctor = cortex("doctor", home=home)
    assert doctor.returncode == 0, doctor.stdout


def test_a_restore_is_refused_while_cortex_dev_runs_idle_and_goes_through_once_it_stopped(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("CORTEX_BRAIN_LINGER_SECONDS", "2")
    home = _home_with_a_message_after_its_backup(tmp_path)
    with cortex_dev(home, tmp_path / "dev.log") as _:
        wait_for(
            lambda: dagster_sqlite.daemon_last_reported(home / "dagster_home") is not None,
            120,
            "the Dagster daemon's first report",
        )
        refused = cortex("doctor", "--restore", "--yes", home=home, check=False)
        assert refused.returncode == 1
        (line,) = refused.stderr.strip().splitlines()
        assert line.startswith("cortex: `cortex dev` is running in this home"), line
        assert "PINEAPPLE" in cortex("recall", "locker code", home=home).stdout  # nothing was restored

    assert dagster_sqlite.daemon_last_reported(home / "dagster_home") is None  # cleared as it stopped
    restored = cortex("doctor", "--restore", "--yes", home=home)  # so at once, no waiting
    assert "rolled back 1 message(s)" in restored.stdout
    assert "PINEAPPLE" not in cortex("recall", "locker code", "--json", home=home).stdout
    published = {p.name: p.read_text() for p in (home / "out").glob("*.md")}
    assert "BOOTSTRAP.md" in published
    assert not [name for name, text in published.items() if "PINEAPPLE" in text]
    assert json.loads(cortex("status", "--json", home=home).stdout)["bus"]["completed"] == 1


@pytest.mark.soak  # slow edge case, kept out of CI's 30 minutes: pytest -m soak
def test_a_second_restore_counts_and_sets_aside_what_took_the_ids_of_its_backup(tmp_path):
    """After one restore new messages and replies take ids again; a second restore compared ids
    alone, so it rolled "I work as a nurse" back without a word and left its reply's outbox file in
    place of the restored reply of that id (QA, helper-27)."""
    home = tmp_path / "home"
    cortex("send", "webchat", "Good morning!", home=home)
    cortex("run", home=home)
    one = shutil.copy(home / "cortex.duckdb", tmp_path / "one-message.duckdb")
    for text in ("I live in Lisbon.", "I have a cat called Miso."):
        cortex("send", "webchat", text, home=home)
    cortex("run", home=home)
    three = shutil.copy(home / "cortex.duckdb", tmp_path / "three-messages.duckdb")

    cortex("doctor", "--restore", str(one), "--yes", home=home)
    cortex("send", "webchat", "I work as a nurse.", home=home)  # takes message id 2 again
    cortex("run", home=home)
    replies = home / "outbox" / "webchat"
    nurse_reply = json.loads((replies / "0000000002.json").read_text())

    restored = cortex("doctor", "--restore", str(three), "--yes", home=home)
    assert "rolled back 1 message(s) and 1 reply(ies) from after the backup" in restored.stdout, (
        restored.stdout
    )
    moved = [p for p in (home / "outbox").glob(".rolled-back-*/webchat/*.json")]
    assert nurse_reply in [json.loads(p.read_text()) for p in moved]
    assert not (replies / "0000000002.json").exists() or (
        json.loads((replies / "0000000002.json").read_text()) != nurse_reply
    )
