"""No single inbox entry can stop the others: each is ingested, rejected with a `.error` note, or
reported as deferred (issue 13, item 2).

Names are measured in UTF-8 bytes against NAME_MAX. Only each name counts, not the tmp_path above
the inbox. mtimes are set explicitly: "old" is past every patience window, and "being written" is a
minute in the future, so a slow start of the pass cannot make it look settled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance

from cortex_pipelines.config import Settings
from cortex_pipelines.files import NAME_MAX
from cortex_pipelines.ingest.inbox import ingest_inbox
from cortex_pipelines.sensors.inbox import inbox_sensor
from cortex_pipelines.storage import Database, bus
from tests.support.inbox import drop, msg
from tests.support.sensors import evaluate

REPO = Path(__file__).resolve().parents[2]
OLD_S = 3600


def _age(path: Path, seconds: float = OLD_S) -> Path:
    when = time.time() - seconds
    os.utime(path, (when, when), follow_symlinks=False)
    return path


def _being_written(path: Path) -> Path:
    return _age(path, -60)


def _name(unit: str, ext: str, size: int = NAME_MAX) -> str:
    """A file name of exactly `size` UTF-8 bytes: whole `unit` characters, padded with 'x'."""
    room = size - len(ext.encode())
    body = unit * (room // len(unit.encode()))
    return body + "x" * (room - len(body.encode())) + ext


def _rejected(settings: Settings) -> dict[str, str]:
    """Rejected entries (relative to .rejected/) with their notes; fails on an entry without one."""
    root = settings.paths.rejected
    entries = [p for p in root.glob("*/*") if not p.name.endswith(".error")]
    notes = {p.relative_to(root).as_posix(): p.with_name(p.name + ".error") for p in entries}
    assert all(note.is_file() for note in notes.values()), notes
    assert len(list(root.glob("*/*.error"))) == len(notes)  # no note without its entry
    texts = {rel: note.read_text() for rel, note in notes.items()}
    assert all(t.count("\n") == 1 and len(t) < 400 for t in texts.values()), texts
    return texts


def _waiting(settings: Settings) -> list[Path]:
    inbox = settings.paths.inbox
    return sorted(p for p in inbox.glob("*/*") if p.parent.name not in (".rejected", ".ingested"))


def test_long_names_are_rejected_and_archived_within_name_max(settings, db):
    bad = _age(drop(settings, "webchat", _name("b", ".json"), '{"channel": '))
    twin = _age(drop(settings, "webchat", _name("b", "-2.json"), '{"channel": '))  # same first 240 bytes
    wide = _age(drop(settings, "webchat", _name("é", ".jsonl"), json.dumps({"channel": "webchat"})))
    assert {len(os.fsencode(p.name)) for p in (bad, twin, wide)} == {NAME_MAX}
    long_good = drop(settings, "webchat", _name("ü", ".json"), msg("webchat", "long name", "l1"))
    collide = _name("c", ".json", 240)  # fits alone; with the collision stamp it would not
    drop(settings, "webchat", collide, msg("webchat", "first", "c1"))

    report = ingest_inbox(settings, db)
    drop(settings, "webchat", collide, msg("webchat", "second, same name", "c2"))
    again = ingest_inbox(settings, db)

    assert (report.accepted, again.accepted) == (2, 1)
    assert len(report.rejected) == 3 and report.deferred == again.deferred == []
    notes = _rejected(settings)
    assert len(notes) == 3  # the twins keep distinct names: a hash of the whole name tells them apart
    assert "invalid JSON" in " ".join(notes.values()) and "missing field" in " ".join(notes.values())
    assert all(rel.endswith((".json", ".jsonl")) for rel in notes)
    archived = sorted(p.read_text() for p in (settings.paths.ingested / "webchat").iterdir())
    assert archived == sorted(
        json.dumps(msg("webchat", text, ext))
        for text, ext in [("long name", "l1"), ("first", "c1"), ("second, same name", "c2")]
    )
    assert not long_good.exists() and _waiting(settings) == []
    assert all(len(os.fsencode(p.name)) <= NAME_MAX for p in settings.paths.inbox.rglob("*"))


def test_a_folder_inside_a_channel_folder_is_rejected_whole_and_unread(settings, db):
    folder = settings.paths.inbox / "webchat" / "x.json"
    (folder / "inner").mkdir(parents=True)
    (folder / "inner" / "m.json").write_text(json.dumps(msg("webchat", "inside a folder", "f1")))
    drop(settings, "webchat", "good.json", msg("webchat", "beside it", "g1"))

    report = ingest_inbox(settings, db)

    assert report.accepted == 1 and [f.path for f in report.rejected] == [folder]
    moved = settings.paths.rejected / "webchat" / "x.json"
    assert (moved / "inner" / "m.json").is_file() and not folder.exists()
    assert "a folder" in _rejected(settings)["webchat/x.json"]
    assert db.query("SELECT text FROM bus") == [("beside it",)]


def test_temporary_names_and_dot_folders_are_deferred_then_rejected(settings, db):
    entries = [
        drop(settings, "..webchat", "a.json", msg("webchat", "a dot-dot channel folder", "d1")),
        drop(settings, ".staging", "b.json", msg("webchat", "a writer's staging folder", "d2")),
        drop(settings, "webchat", ".c.json", '{"chan'),
        drop(settings, "webchat", "d.json.tmp", msg("webchat", "not renamed yet", "d3")),
        drop(settings, "webchat", "e.json.part", msg("webchat", "not renamed yet", "d4")),
    ]
    dot_file = settings.paths.inbox / ".DS_Store"
    dot_file.write_bytes(b"\0\0\0\1Bud1")
    dot_dir = settings.paths.inbox / "webchat" / ".cache"
    dot_dir.mkdir()
    entries += [dot_file, dot_dir]
    for path in entries:
        _being_written(path)

    first = ingest_inbox(settings, db)
    assert {f.path for f in first.deferred} == set(entries) and first.rejected == []
    assert all(f.error.startswith("a temporary name") for f in first.deferred)
    assert all(p.exists() for p in entries)

    for path in entries:
        _age(path)
    second = ingest_inbox(settings, db)
    assert {f.path for f in second.rejected} == set(entries) and second.deferred == []
    assert set(_rejected(settings)) == {
        "..webchat/a.json",
        ".staging/b.json",
        "webchat/.c.json",
        "webchat/d.json.tmp",
        "webchat/e.json.part",
        "_root/.DS_Store",
        "webchat/.cache",
    }
    assert db.query("SELECT count(*) FROM bus") == [(0,)]


def test_jsonl_lines_end_only_at_newline(settings, db):
    messages = [
        msg("webchat", "line\u2028separator", "s1"),
        msg("webchat", "paragraph\u2029separator", "s2"),
        msg("webchat", "a C1 next-line in metadata", "s3", metadata={"raw": "a\x85b"}),
    ]
    raw = "".join(json.dumps(m, ensure_ascii=False) + "\r\n" for m in messages)
    assert len(raw.splitlines()) > len(messages)  # what str.splitlines would have cut
    drop(settings, "webchat", "separators.jsonl", raw)

    report = ingest_inbox(settings, db)

    assert report.accepted == 3 and report.rejected == []
    rows = db.query("SELECT text, metadata FROM bus ORDER BY id")
    assert [text for text, _ in rows] == [m["text"] for m in messages]
    assert json.loads(rows[2][1]) == {"raw": "a\x85b"}


def test_a_hard_link_to_a_file_outside_home_is_never_read(settings, db, tmp_path):
    outside = tmp_path / "secret.json"
    outside.write_text(json.dumps(msg("webchat", "the PIN is 4417", "stolen")))
    before = outside.read_bytes()
    link = settings.paths.inbox / "webchat" / "link.json"
    link.parent.mkdir(parents=True, exist_ok=True)
    os.link(outside, link)

    _being_written(link)  # a writer between link() and unlink() gets a moment
    first = ingest_inbox(settings, db)
    assert [f.path for f in first.deferred] == [link] and "hard link" in first.deferred[0].error
    _age(link)
    second = ingest_inbox(settings, db)

    assert second.accepted == 0 and [f.path for f in second.rejected] == [link]
    assert "hard links are not accepted" in _rejected(settings)["webchat/link.json"]
    assert db.query("SELECT count(*) FROM bus") == [(0,)]
    assert outside.read_bytes() == before


def test_an_undecodable_file_name_does_not_stop_the_batch(settings, db):
    folder = settings.paths.inbox / "webchat"
    folder.mkdir(parents=True, exist_ok=True)
    odd = folder / os.fsdecode(b"caf\xe9\nname.json")  # Latin-1 bytes and a newline
    odd.write_text(json.dumps(msg("webchat", "odd name", "o1")))
    drop(settings, "webchat", "plain.json", msg("webchat", "plain name", "p1"))

    report = ingest_inbox(settings, db)

    assert report.accepted == 2
    assert sorted(db.query("SELECT source FROM bus")) == [
        ("inbox/webchat/caf\\xe9\\nname.json",),
        ("inbox/webchat/plain.json",),
    ]


def test_an_entry_that_cannot_be_moved_is_reported_and_the_rest_still_land(settings, db):
    settings.paths.rejected.mkdir(parents=True, exist_ok=True)
    (settings.paths.rejected / "webchat").write_text("a file where the folder should be")
    settings.paths.ingested.mkdir(parents=True, exist_ok=True)
    (settings.paths.ingested / "telegram").write_text("a file where the folder should be")
    bad = _age(drop(settings, "webchat", "bad.json", '{"channel": '))
    stuck = drop(settings, "telegram", "stuck.json", msg("telegram", "in, not archived", "t1"))
    good = drop(settings, "webchat", "good.json", msg("webchat", "lands anyway", "w1"))

    report = ingest_inbox(settings, db)

    assert report.accepted == 2 and not good.exists() and bad.exists() and stuck.exists()
    deferred = {f.path: f.error for f in report.deferred}
    assert set(deferred) == {bad, stuck} and report.rejected == []
    assert deferred[bad].startswith("could not be moved to .rejected")
    assert deferred[stuck].startswith("ingested, but not moved to .ingested")

    (settings.paths.rejected / "webchat").unlink()
    (settings.paths.ingested / "telegram").unlink()
    after = ingest_inbox(settings, db)
    assert (after.accepted, after.duplicates) == (0, 1) and after.deferred == []
    assert set(_rejected(settings)) == {"webchat/bad.json"} and _waiting(settings) == []


def test_the_inbox_sensor_logs_deferred_files(settings, db, capsys):
    _being_written(drop(settings, "webchat", "partial.json", '{"channel": "web'))
    with DagsterInstance.ephemeral() as instance:
        evaluate(inbox_sensor, instance, str(settings.home))
    assert "deferred partial.json: still being written (invalid JSON" in capsys.readouterr().err


@pytest.mark.slow
def test_cortex_run_answers_good_files_beside_every_hostile_entry(settings, tmp_path):
    """The real `cortex run` over an inbox holding each entry that used to stop the inbox."""
    inbox, web = settings.paths.inbox, settings.paths.inbox / "webchat"
    good = [
        drop(settings, "webchat", f"good-{n}.json", msg("webchat", f"good message {n}", f"g{n}"))
        for n in range(3)
    ]
    collide = _name("c", ".json", 240)
    (settings.paths.ingested / "webchat").mkdir(parents=True)
    (settings.paths.ingested / "webchat" / collide).write_text("archived earlier under the same name")
    good.append(drop(settings, "webchat", collide, msg("webchat", "a long name seen before", "c1")))
    separators = json.dumps(msg("webchat", "a\u2028b", "s1"), ensure_ascii=False)
    good.append(drop(settings, "webchat", "separators.jsonl", separators))
    odd = web / os.fsdecode(b"\xff\nodd.json")
    odd.write_text(json.dumps(msg("webchat", "an undecodable name", "o1")))
    good.append(odd)
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(msg("webchat", "read through a hard link", "h1")))
    os.link(outside, web / "link.json")
    (web / "x.json").mkdir()
    bad = [
        drop(settings, "webchat", _name("b", ".json"), '{"channel": '),
        drop(settings, "..webchat", "a.json", msg("webchat", "wrong folder", "d1")),
        web / "link.json",
        web / "x.json",
    ]
    for path in bad:
        _age(path)
    partial = _being_written(drop(settings, "webchat", "partial.json", '{"channel": "web'))

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORTEX_", "DAGSTER_"))}
    env |= {"CORTEX_HOME": str(settings.home), "PYTHONIOENCODING": "utf-8"}

    cmd = [sys.executable, "-m", "cortex_pipelines.cli", "run"]
    run = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ingested 6 message(s), 0 duplicate(s), 4 rejected file(s), 1 deferred file(s)" in run.stdout
    assert f"deferred {partial}: still being written (invalid JSON" in run.stderr
    counts = Database(settings.paths.db).run(bus.counts)  # read after the process exited
    assert (counts["completed"], counts["pending"], counts["processing"], counts["failed"]) == (6, 0, 0, 0)
    archived = {p.read_text() for p in (settings.paths.ingested / "webchat").iterdir()}
    assert "archived earlier under the same name" in archived and len(archived) == len(good) + 1
    notes = _rejected(settings)
    assert len(notes) == len(bad) and {"webchat/link.json", "webchat/x.json", "..webchat/a.json"} < set(notes)
    assert _waiting(settings) == [partial]  # only the file still being written waits
    assert all(not p.exists() for p in good + bad)
    assert all(len(os.fsencode(p.name)) <= NAME_MAX for p in inbox.rglob("*"))


# A connector that keeps its .jsonl open and appends a line for each line it reads on stdin.
APPENDER = """
import sys
with open(sys.argv[1], "a") as log:
    for line in sys.stdin:
        log.write(line)
        log.flush()
        print("written", flush=True)
"""


def test_a_jsonl_appended_in_place_loses_no_line(settings, db):
    """QA scenario 8: archived while its writer still appended, a file took the later lines with it
    to .ingested unread. It now stays in the inbox until its writer closes it."""
    path = settings.paths.inbox / "webchat" / "log.jsonl"
    path.parent.mkdir(parents=True)
    writer = subprocess.Popen(
        [sys.executable, "-c", APPENDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )

    def append(*ids: str) -> None:
        for ext in ids:
            writer.stdin.write(json.dumps(msg("webchat", f"line {ext}", ext)) + "\n")
            writer.stdin.flush()
            assert writer.stdout.readline() == "written\n"

    append("a1", "a2")
    first = ingest_inbox(settings, db)
    append("a3", "a4")
    second = ingest_inbox(settings, db)
    writer.stdin.close()
    assert writer.wait(timeout=30) == 0
    last = ingest_inbox(settings, db)

    assert [(r.accepted, r.duplicates) for r in (first, second, last)] == [(2, 0), (2, 2), (0, 4)]
    assert [f.error for f in first.files] == [
        "ingested, but left for the next pass: a writer still has it open"
    ]
    assert last.files[0].error is None and not path.exists()
    assert db.query("SELECT external_id FROM bus ORDER BY id") == [("a1",), ("a2",), ("a3",), ("a4",)]
    assert len((settings.paths.ingested / "webchat" / "log.jsonl").read_text().splitlines()) == 4


def test_a_line_appended_during_the_commit_is_read_next_pass(settings, db, monkeypatch):
    """A writer that opens, appends and closes between the read and the archiving: the file's new
    size says so, and the next pass reads the line."""
    path = drop(settings, "webchat", "log.jsonl", msg("webchat", "first", "c1"))

    def enqueue_then_append(con, rows, source):
        with path.open("a") as log:
            log.write(json.dumps(msg("webchat", "appended meanwhile", "c2")) + "\n")
        return bus.enqueue_rows(con, rows, source)

    with monkeypatch.context() as patch:
        patch.setattr("cortex_pipelines.ingest.inbox.enqueue_rows", enqueue_then_append)
        first = ingest_inbox(settings, db)
    second = ingest_inbox(settings, db)

    assert [(r.accepted, r.duplicates) for r in (first, second)] == [(1, 0), (1, 1)]
    assert "it changed while it was read" in first.files[0].error
    assert not path.exists()
    assert db.query("SELECT external_id FROM bus ORDER BY id") == [("c1",), ("c2",)]
