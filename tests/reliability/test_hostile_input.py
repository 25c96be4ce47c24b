"""Hostile input: every bad file is rejected with a one-line reason, nothing outside CORTEX_HOME
is read or written, and every good message beside it still lands."""

from __future__ import annotations

import json
import os
import string
import time
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from cortex_pipelines.config import load_settings
from cortex_pipelines.ingest.envelope import EnvelopeError, validate
from cortex_pipelines.ingest.inbox import ingest_inbox
from cortex_pipelines.storage import bus

GOOD = {"channel": "webchat", "text": "a perfectly normal message", "sender": "maya"}


def _age(path, seconds: int = 10) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past), follow_symlinks=False)


def _write(folder, name: str, data: bytes):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    _age(path)
    return path


def test_hostile_corpus_is_rejected_and_good_files_land(settings, db, tmp_path):
    inbox = settings.paths.inbox
    web = inbox / "webchat"
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({**GOOD, "external_id": "stolen"}))
    now = datetime.now(UTC)
    hostile = {
        "invalid-utf8.json": b'{"channel": "webchat", "text": "\xff\xfe", "sender": "m"}',
        "huge.json": json.dumps({**GOOD, "text": "x" * 10_000_000}).encode(),
        "nested.json": b'{"channel": "webchat", "sender": "m", "text": "t", "metadata": '
        + b'{"a": ' * 1000
        + b"1"
        + b"}" * 1001,
        "nul.json": json.dumps({**GOOD, "text": "nul\x00byte"}).encode(),
        "empty.json": b"",
        "blank.json": b"   \n\t  \n",
        "array.json": json.dumps([GOOD]).encode(),
        "wrong-types.json": json.dumps({**GOOD, "sender": 7, "priority": ["urgent"]}).encode(),
        "path-channel.json": json.dumps({**GOOD, "channel": "../x"}).encode(),
        "slash-channel.json": json.dumps({**GOOD, "channel": "a/b"}).encode(),
        "con-channel.json": json.dumps({**GOOD, "channel": "CON"}).encode(),
        "long-channel.json": json.dumps({**GOOD, "channel": "c" * 300}).encode(),
        "past.json": json.dumps({**GOOD, "timestamp": "1970-01-01T00:00:00Z"}).encode(),
        "future.json": json.dumps({**GOOD, "timestamp": (now + timedelta(days=400)).isoformat()}).encode(),
        "control.json": json.dumps({**GOOD, "text": "ring \x07 ring"}).encode(),
        "bidi.json": json.dumps({**GOOD, "text": "invoice \u202egnp.exe"}).encode(),
        "not-json.txt": b"hello",
    }
    for name, data in hostile.items():
        _write(web, name, data)
    (web / "link.json").symlink_to(outside)
    _age(web / "link.json")
    _write(inbox, "root-level.json", json.dumps(GOOD).encode())
    _write(inbox / "nosuchchannel", "a.json", json.dumps({**GOOD, "channel": "nosuchchannel"}).encode())
    good = [
        _write(web, f"good-{n}.json", json.dumps({**GOOD, "external_id": f"g{n}"}).encode()) for n in range(3)
    ]
    _write(
        inbox / "telegram",
        "good.jsonl",
        "".join(
            json.dumps({**GOOD, "channel": "telegram", "external_id": f"t{n}"}) + "\n" for n in range(5)
        ).encode(),
    )
    # The same external id with different text: the first one wins, the second is a duplicate.
    _write(web, "zz-same-id.json", json.dumps({**GOOD, "external_id": "g0", "text": "changed"}).encode())
    before_outside = outside.read_bytes()

    report = ingest_inbox(settings, db)

    assert report.accepted == 8 and db.run(bus.counts)["pending"] == 8
    assert db.query("SELECT text FROM bus WHERE external_id = 'g0'") == [(GOOD["text"],)]
    rejected = {f.path.name: f.error for f in report.rejected}
    expected = {*hostile, "link.json", "root-level.json", "a.json"}
    assert set(rejected) == expected
    for name, reason in rejected.items():
        assert reason and "\n" not in reason and len(reason) < 300, name
    notes = list(settings.paths.rejected.rglob("*.error"))
    assert len(notes) == len(expected)
    assert all(n.read_text().count("\n") == 1 for n in notes)
    assert outside.read_bytes() == before_outside  # never read through, never touched
    assert all(not p.exists() for p in good)  # good files left the inbox after the commit
    for path in settings.home.rglob("*"):
        assert settings.home in path.resolve().parents or path.is_symlink()


CHANNELS = st.sampled_from(["webchat", "telegram", "cron", "router", "../etc", "A", "", "x" * 40, "ok-1"])
TEXT = st.text(min_size=0, max_size=200)
VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    TEXT,
    st.lists(st.integers(), max_size=3),
    st.dictionaries(TEXT, st.integers(), max_size=3),
)


@hsettings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    channel=CHANNELS,
    text=st.one_of(TEXT, VALUE),
    sender=st.one_of(st.text(alphabet=string.printable, max_size=20), VALUE),
    extra=st.dictionaries(
        st.sampled_from(["priority", "timestamp", "metadata", "reply_to", "bogus"]), VALUE, max_size=3
    ),
)
def test_validate_accepts_only_clean_envelopes_and_explains_the_rest(channel, text, sender, extra):
    settings = load_settings()
    raw = {"channel": channel, "text": text, "sender": sender, **extra}
    try:
        row = validate(raw, settings, datetime.now(UTC), folder_channel=None)
    except EnvelopeError as exc:
        reason = str(exc)
        assert reason and "\n" not in reason and len(reason) < 400
        return
    # Accepted: everything in the row is well-formed.
    assert row["channel"] in settings.known_channels()
    assert isinstance(row["text"], str) and row["text"].strip()
    assert not any(ord(c) < 32 and c not in "\t\n\r" for c in row["text"])
    assert row["priority"] in ("urgent", "normal", "background")
    assert isinstance(json.loads(row["metadata"]), dict)
