"""Recall keeps what it reads from DuckDB in the process while no process has written the file, so
a warm recall does not open DuckDB at all; and still, every write by another process is seen by
the next query: a turn `cortex run` recorded, a fact `cortex forget` hid, a turn `cortex erase`
removed."""

from __future__ import annotations

import json
import time

import pytest

from cortex_pipelines.config import load_settings
from cortex_pipelines.memory.recall import recall
from cortex_pipelines.storage import Database
from cortex_pipelines.storage.db import SETTLED_S
from tests.support.cli import cortex
from tests.support.stores import held_by_another_process


def _settle() -> None:
    """Past the window in which recall keeps nothing (a write in the same clock tick as another may
    leave the file's times as they were): from here on, a stale read would be kept and returned."""
    time.sleep(SETTLED_S + 0.2)


def _texts(hits) -> list[str]:
    return [h.text for h in hits]


def _home(tmp_path, *said: str):
    home = tmp_path / "home"
    cortex("init", home=home)
    for text in said:
        cortex("send", "webchat", text, home=home)
    cortex("run", home=home)
    settings = load_settings(home)
    return home, settings, Database(settings.paths.db)


@pytest.mark.soak
@pytest.mark.slow
def test_a_warm_recall_needs_no_duckdb_and_sees_a_turn_cortex_run_records_in_another_process(tmp_path):
    home, settings, db = _home(tmp_path, "The boathouse key hangs behind the kitchen door.")
    _settle()
    assert "boathouse" in recall(db, settings, "where is the boathouse key", k=3)[0].text
    with held_by_another_process(settings.paths.db):  # nothing written since: nothing to read
        assert "boathouse" in recall(db, settings, "where is the boathouse key", k=3)[0].text

    # Not indexed (history): only DuckDB has it, in the tail of turns recall reads from there.
    history = tmp_path / "history.jsonl"
    history.write_text(
        json.dumps({"channel": "webchat", "text": "The wifi password is tangerine42.", "sender": "maya"})
    )
    cortex("ingest", str(history), "--history", home=home)
    _settle()
    assert any("tangerine42" in text for text in _texts(recall(db, settings, "wifi password", k=3)))

    cortex("send", "webchat", "My gym locker code is 4471.", home=home)
    cortex("run", home=home)
    _settle()
    assert any("4471" in text for text in _texts(recall(db, settings, "gym locker code", k=3)))


@pytest.mark.slow
def test_forget_and_erase_in_another_process_leave_nothing_stale_in_a_warm_recall(tmp_path):
    home, settings, db = _home(
        tmp_path, "Remember that my locker code is 4417-ZQX.", "I prefer window seats on long flights."
    )
    _settle()
    hits = recall(db, settings, "locker code", k=5)
    fact_id = next(h.fact_id for h in hits if "4417" in h.text and h.fact_id)
    cortex("forget", str(fact_id), home=home)
    _settle()
    assert not [t for t in _texts(recall(db, settings, "locker code", k=10)) if "4417" in t]

    cortex("unforget", str(fact_id), home=home)
    _settle()
    assert any("4417" in t for t in _texts(recall(db, settings, "locker code", k=5)))
    # 8 characters at least: "4417" alone also matched digits of timestamps in Dagster's storage
    done = json.loads(cortex("erase", "--matching", "4417-ZQX", "--yes", "--json", home=home).stdout)
    assert done, done
    _settle()
    assert not [t for t in _texts(recall(db, settings, "locker code", k=10)) if "4417" in t]
    assert "window" in recall(db, settings, "which seat do I like", k=3)[0].text
