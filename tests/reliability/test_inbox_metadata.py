"""An envelope's metadata is checked like the rest of it: one that would not store as UTF-8 JSON
(a lone surrogate, NaN), an oversized one, or a recipient id that is not an id is refused with
a one-line reason, by the inbox, `cortex ingest` and POST /ingest alike, and never stops the
messages beside it (QA scenario 13: one such file failed every `cortex run`)."""

from __future__ import annotations

import json

import httpx
import pytest

from cortex_pipelines.ingest.envelope import MAX_METADATA_BYTES
from cortex_pipelines.ingest.inbox import ingest_inbox
from cortex_pipelines.storage import bus
from tests.support.cli import cortex
from tests.support.gateway import AUTH, cortex_serve
from tests.support.inbox import drop, msg

# As a connector writes them: \ud83d is valid JSON text, and json.loads turns it into a lone surrogate.
SURROGATE = '{"channel":"webchat","text":"poison","sender":"user","metadata":{"chat_id":"\\ud83d"}}'
HOSTILE = {
    "surrogate.json": SURROGATE,
    "surrogate-key.json": '{"channel":"webchat","text":"k","sender":"u","metadata":{"\\udfff":1}}',
    "nan.json": '{"channel":"webchat","text":"nan","sender":"u","metadata":{"x":NaN}}',
    "infinite.json": '{"channel":"webchat","text":"inf","sender":"u","metadata":{"x":1e400}}',
    "long-number.json": '{"channel":"webchat","text":"n","sender":"u","metadata":{"x":' + "9" * 5000 + "}}",
    "huge.json": json.dumps(msg("webchat", "huge", "h1", metadata={"blob": "x" * MAX_METADATA_BYTES})),
    "list-chat.json": json.dumps(msg("webchat", "list", "l1", metadata={"chat_id": ["a", {"b": 1}]})),
    "object-message.json": json.dumps(msg("webchat", "obj", "o1", metadata={"message_id": {"id": 1}})),
    "bool-chat.json": json.dumps(msg("webchat", "bool", "b1", metadata={"chat_id": True})),
}


def test_bad_metadata_is_rejected_and_the_files_beside_it_land(settings, db):
    drop(settings, "webchat", "a-good.json", msg("webchat", "good one", "g1"))
    for name, raw in HOSTILE.items():
        drop(settings, "webchat", name, raw)
    drop(
        settings,
        "webchat",
        "z-good.jsonl",
        msg("webchat", "numeric chat", "g2", metadata={"chat_id": -1001234, "message_id": 7}),
        msg("webchat", "string chat", "g3", metadata={"chat_id": "c-9", "note": "é" * 100}),
    )

    report = ingest_inbox(settings, db)
    again = ingest_inbox(settings, db)  # the poison used to fail every pass

    assert (report.accepted, again.accepted, again.files) == (3, 0, [])
    reasons = {f.path.name: f.error for f in report.rejected}
    assert set(reasons) == set(HOSTILE)
    for name, reason in reasons.items():
        note = (settings.paths.rejected / "webchat" / f"{name}.error").read_text()
        assert note == reason + "\n" and len(note) < 200, name
    assert "lone surrogate" in reasons["surrogate.json"]
    assert "NaN" in reasons["nan.json"] and "NaN" in reasons["infinite.json"]
    assert "4300 digits" in reasons["long-number.json"]
    assert f"over the {MAX_METADATA_BYTES}-byte limit" in reasons["huge.json"]
    assert "'metadata.chat_id': must be a string or an integer" in reasons["list-chat.json"]
    assert "'metadata.message_id'" in reasons["object-message.json"]
    assert db.run(bus.counts)["pending"] == 3
    rows = db.query("SELECT external_id, metadata->>'chat_id' FROM bus ORDER BY id")
    assert rows == [("g1", None), ("g2", "-1001234"), ("g3", "c-9")]


def test_cortex_ingest_refuses_bad_metadata_in_one_line(tmp_path):
    home = tmp_path / "home"
    poison = tmp_path / "poison.json"
    poison.write_text(SURROGATE)

    done = cortex("ingest", str(poison), home=home, check=False)

    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"rejected {poison}: field 'metadata': not valid Unicode (a lone surrogate)"
    ]


@pytest.mark.slow
def test_the_gateway_answers_bad_metadata_with_400(tmp_path):
    with cortex_serve(tmp_path / "home", tmp_path / "serve.log") as (base, _, _):
        headers = {**AUTH, "Content-Type": "application/json"}
        poisoned = httpx.post(f"{base}/ingest", content=SURROGATE.encode(), headers=headers)
        listed = httpx.post(f"{base}/ingest", content=HOSTILE["list-chat.json"].encode(), headers=headers)
        good = httpx.post(f"{base}/ingest", json=msg("webchat", "still fine", "g1"), headers=AUTH)

    assert poisoned.status_code == 400, poisoned.text
    assert poisoned.json() == {"error": "field 'metadata': not valid Unicode (a lone surrogate)"}
    assert listed.status_code == 400 and "metadata.chat_id" in listed.json()["error"]
    assert good.status_code == 202
