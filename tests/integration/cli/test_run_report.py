"""What `cortex run` prints, through the real CLI: the replies it made itself, each once (QA: two runs
started together in one home each printed all 30 replies, as if 60 had been made), and those it
made before a full disk ended it (QA: a run that met a full disk once it had answered some printed
none of them, though they were in the database and the outbox)."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest

from tests.support.cli import cortex, together

pytestmark = pytest.mark.timeout(300)

REPLY = re.compile(r"^webchat ← #(\d+): ", re.MULTILINE)
FULL = "is full (nothing was lost); to repair: free some space"


def _replied_to(stdout: str) -> list[int]:
    """The bus ids of the replies a `cortex run` printed."""
    return [int(found) for found in REPLY.findall(stdout)]


def _waiting_replies(home: Path) -> list[int]:
    return sorted(reply["reply_to"] for reply in json.loads(cortex("outbox", "--json", home=home).stdout))


def _drop_messages(home: Path, count: int) -> None:
    """`count` messages in one inbox file, written as a connector writes one (a temporary name, then
    a rename)."""
    box = home / "inbox" / "webchat"
    box.mkdir(parents=True, exist_ok=True)
    lines = [
        {"channel": "webchat", "sender": "user", "text": f"Note number {i}.", "external_id": f"m{i}"}
        for i in range(count)
    ]
    partial = box / ".batch.jsonl.tmp"
    partial.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    partial.rename(box / "batch.jsonl")


@pytest.mark.slow
def test_two_runs_started_together_each_print_only_the_replies_they_made(tmp_path):
    home = tmp_path / "home"
    _drop_messages(home, 30)

    runs = together("run", home=home)
    outputs = [(run.stdout, run.stderr) for run in runs]
    for run in runs:
        assert run.returncode == 0, f"--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}"

    made = _waiting_replies(home)
    assert len(made) == 30 and len(set(made)) == 30, made  # nothing answered twice
    printed = [_replied_to(stdout) for stdout, _ in outputs]
    assert sorted(printed[0] + printed[1]) == made, printed  # each reply printed once, by its run
    for (stdout, _), own in zip(outputs, printed, strict=True):
        if not own:  # a run that answered nothing says why, in one line
            said = [line for line in stdout.splitlines() if "another process answered" in line]
            assert len(said) == 1 or "waiting for run(s)" in stdout, stdout
            assert not said or said[0].startswith("another process answered meanwhile: "), said


# Dagster's run and event storage (SQLite) meets a full disk once the brain has written `after`
# reply files: every write there fails as SQLite fails it, "database or disk is full".
FULL_DISK_AFTER_REPLIES = """
    import os
    import sqlite3
    from pathlib import Path

    _connect = sqlite3.dbapi2.connect
    _replies = Path(os.environ["CORTEX_HOME"]) / "outbox" / "webchat"
    _after = int(os.environ["FULL_AFTER_REPLIES"])


    def _full():
        return _replies.is_dir() and len(list(_replies.glob("*.json"))) >= _after


    class _Cursor(sqlite3.Cursor):
        def execute(self, sql, *args):
            if _full() and sql.split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE", "REPLACE"):
                raise sqlite3.OperationalError("database or disk is full")
            return super().execute(sql, *args)


    class _Connection(sqlite3.Connection):
        def cursor(self, factory=_Cursor):
            return super().cursor(factory)

        def execute(self, sql, *args):
            return self.cursor().execute(sql, *args)


    def connect(*args, **kwargs):
        kwargs.setdefault("factory", _Connection)
        return _connect(*args, **kwargs)


    sqlite3.connect = sqlite3.dbapi2.connect = connect
"""


@pytest.mark.slow
def test_a_run_that_meets_a_full_disk_prints_the_replies_it_had_made(tmp_path):
    home = tmp_path / "home"
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(textwrap.dedent(FULL_DISK_AFTER_REPLIES), encoding="utf-8")
    for i in range(5):
        cortex("send", "webchat", f"Note number {i}.", home=home)

    path = os.pathsep.join(p for p in (str(inject), os.environ.get("PYTHONPATH")) if p)
    full = cortex("run", home=home, check=False, env={"PYTHONPATH": path, "FULL_AFTER_REPLIES": "2"})
    assert full.returncode == 1, f"--- stdout\n{full.stdout}\n--- stderr\n{full.stderr}"
    last = full.stderr.strip().splitlines()[-1]
    assert last.startswith("cortex: the disk holding") and FULL in last, full.stderr
    assert "Traceback" not in full.stderr, full.stderr
    made = _waiting_replies(home)
    assert len(made) == 2, made
    assert _replied_to(full.stdout) == made, full.stdout  # what it answered, printed before the error

    rest = cortex("run", home=home)  # space is back: the others are answered, nothing twice
    assert sorted(made + _replied_to(rest.stdout)) == _waiting_replies(home)
    assert len(_waiting_replies(home)) == 5
