"""An inbox pass SIGKILLed anywhere loses no message, doubles none and strands no file.

tests/support/crash_worker.py runs one real ingest pass over a mixed inbox (single files, .jsonl batches,
a message without an id, a re-sent message, two bad files) and kills itself before the bus insert,
inside its transaction, after the commit between archive moves, or between moving a bad file and
writing its note. The next pass must leave every message in the bus exactly once, the inbox empty,
each good file archived once and each bad file rejected once with its reason. One extra case per
run is drawn at random; its seed is in the test id (re-run a failure with CRASH_SEED=<seed>).
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest

from cortex_pipelines.config import load_settings
from cortex_pipelines.ingest.inbox import ingest_inbox
from cortex_pipelines.instance import init_home
from cortex_pipelines.storage import Database
from tests.support.crash_worker import INGEST_POINTS, run_worker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _m(channel: str, ext: str | None, text: str) -> dict:
    out = {"channel": channel, "sender": "maya", "text": text}
    return {**out, "external_id": ext} if ext else out


# (channel folder, file name, messages or raw content), oldest first: the pass handles them in order.
GOOD = [
    ("webchat", "001.json", [_m("webchat", "w-1", "Good morning!")]),
    ("webchat", "002.jsonl", [_m("webchat", f"w-{i}", f"Batch line {i}") for i in (2, 3, 4)]),
    ("telegram", "003.json", [_m("telegram", "t-1", "The flight moved to 7am.")]),
    ("telegram", "004.jsonl", [_m("telegram", "t-2", "Window seat please."), _m("telegram", None, "No id")]),
    ("webchat", "006.json", [_m("webchat", "w-5", "Remember the boathouse party.")]),
    ("webchat", "007.json", [_m("webchat", "w-1", "Good morning!")]),  # re-sent by a connector
    ("telegram", "009.json", [_m("telegram", "t-3", "thanks")]),
]
BAD = [
    ("webchat", "005.json", '{"channel": "webchat", "sender": "maya", "text": 42}'),
    ("telegram", "008.json", '{"channel": "webchat", "sender": "maya", "text": "wrong folder"}'),
]
MESSAGES = {(m["channel"], m.get("external_id"), m["text"]) for _, _, ms in GOOD for m in ms}

SEED = int(os.environ["CRASH_SEED"])  # drawn once per test run in conftest.py
_rng = random.Random(SEED)
_POINT = _rng.choice(INGEST_POINTS)
_N_RANGE = {"ingest_after_commit": (0, len(GOOD) - 1), "ingest_mid_reject": (1, len(BAD))}
_N = _rng.randint(*_N_RANGE.get(_POINT, (1, 1)))
CASES = [
    pytest.param("ingest_before_insert", 1, id="before_insert"),
    pytest.param("ingest_mid_insert", 1, id="mid_insert"),
    pytest.param("ingest_after_commit", 0, id="after_commit-before_first_move"),
    pytest.param("ingest_after_commit", 3, id="after_commit-3_moved"),
    pytest.param("ingest_after_commit", len(GOOD) - 1, id="after_commit-all_but_last_moved"),
    pytest.param("ingest_mid_reject", 2, id="mid_reject-2nd_bad_file"),
    pytest.param(_POINT, _N, id=f"random-seed{SEED}-{_POINT}-n{_N}"),
]


def fill_inbox(inbox: Path) -> None:
    """The files as a connector leaves them, with mtimes a few seconds apart in the past."""
    entries = sorted(
        [(folder, name, "".join(json.dumps(m) + "\n" for m in ms)) for folder, name, ms in GOOD] + BAD,
        key=lambda e: e[1],
    )
    start = time.time() - 60
    for n, (folder, name, content) in enumerate(entries):
        path = inbox / folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        os.utime(path, (start + n, start + n))


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def bus_messages(db: Database) -> list[tuple]:
    return db.query("SELECT channel, external_id, text FROM bus ORDER BY id")


@pytest.mark.parametrize(("point", "n"), CASES)
def test_sigkilled_inbox_pass_loses_nothing_and_doubles_nothing(point, n, tmp_path):
    print(f"CRASH_SEED={SEED} point={point} n={n}")
    home = tmp_path / "home"
    settings = load_settings(home)
    init_home(settings)
    db = Database(settings.paths.db)
    inbox = settings.paths.inbox
    fill_inbox(inbox)
    originals = {f"{folder}/{name}": (inbox / folder / name).read_bytes() for folder, name, _ in GOOD + BAD}

    run_worker(home, point, n)

    # What the dead process left: rows only once the insert committed, files moved only up to the kill.
    committed = point == "ingest_after_commit"
    assert len(bus_messages(db)) == (len(MESSAGES) if committed else 0)
    archived = files_under(settings.paths.ingested) if settings.paths.ingested.exists() else []
    assert len(archived) == (n if committed else 0), archived

    report = ingest_inbox(settings, db)
    assert report.accepted == (0 if committed else len(MESSAGES)), report
    assert ingest_inbox(settings, db).files == []  # nothing left for a later pass

    rows = bus_messages(db)
    ids = [(channel, ext) for channel, ext, _ in rows]
    assert len(ids) == len(set(ids)) == len(MESSAGES), rows  # each message in the bus exactly once
    assert {(c, e if not e.startswith("sha256:") else None, t) for c, e, t in rows} == MESSAGES
    assert db.query("SELECT DISTINCT state FROM bus") == [("pending",)]  # all waiting to be answered

    leftover = [f for f in files_under(inbox) if not f.startswith((".ingested/", ".rejected/"))]
    assert leftover == [], leftover  # nothing stranded in the inbox
    # Each good file archived once, byte for byte; each bad one rejected once, beside its reason.
    ingested = files_under(settings.paths.ingested)
    assert ingested == sorted(f"{folder}/{name}" for folder, name, _ in GOOD), ingested
    for rel in ingested:
        assert (settings.paths.ingested / rel).read_bytes() == originals[rel]
    rejected = files_under(settings.paths.rejected)
    bad = sorted(f"{folder}/{name}" for folder, name, _ in BAD)
    assert rejected == sorted([*bad, *(f"{b}.error" for b in bad)]), rejected
    for rel in bad:
        assert (settings.paths.rejected / rel).read_bytes() == originals[rel]
        note = (settings.paths.rejected / f"{rel}.error").read_text(encoding="utf-8")
        assert note.count("\n") == 1 and len(note) > 10, note
