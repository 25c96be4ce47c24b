"""`cortex erase`: a message and everything derived from it leave every store.

The proof the issue asks for runs the real command line on a real instance: after `cortex run` has
materialized every asset (published files, LanceDB, Dagster previews) and a recall has saved its
snapshots, a distinctive string is erased, and then no file under CORTEX_HOME holds it, in any byte.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus

from cortex_pipelines import clock
from cortex_pipelines.admin import erase as eraser
from cortex_pipelines.admin.chat import AdminChat
from cortex_pipelines.config import load_settings
from cortex_pipelines.ingest.envelope import EnvelopeError, validate
from cortex_pipelines.ingest.inbox import ingest_message
from cortex_pipelines.llm.offline import OfflineClient
from cortex_pipelines.memory.compaction import compact_idle_conversations
from cortex_pipelines.memory.embedder import embedder_for
from cortex_pipelines.memory.pipeline import index_episodes, sync_facts
from cortex_pipelines.memory.vectors import EPISODIC, SEMANTIC, vector_store
from cortex_pipelines.storage import Database
from cortex_pipelines.storage import facts as fact_store
from cortex_pipelines.storage.session import import_history
from tests.support.cli import cortex
from tests.support.history import ingest_history
from tests.support.stores import files_holding, read_only

PIN = "4417-ZQX"


@pytest.mark.slow
def test_erased_text_is_in_no_file_under_cortex_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cortex("init", home=home)
    cortex("send", "webchat", f"Remember that my bank PIN is {PIN}", "--sender", "maya", home=home)
    cortex("send", "webchat", "What is my bank PIN?", "--sender", "maya", home=home)
    # A connector's batch: the archive keeps the line that is not erased. Its text does not say it is
    # a PIN, so unlike the messages above it is published as said, and reaches Dagster's previews.
    batch = home / "inbox" / "telegram" / "batch.jsonl"
    batch.parent.mkdir()
    sticker = f"The sticker on my card says {PIN.lower()}"
    batch.write_text(
        json.dumps({"channel": "telegram", "text": "I prefer window seats", "sender": "maya"})
        + "\n"
        + json.dumps({"channel": "telegram", "text": sticker, "sender": "maya"})
        + "\n",
        encoding="utf-8",
    )
    cortex("send", "webchat", "My sister Ana lives in Lisbon", "--sender", "maya", home=home)
    # Files the inbox rejects, which it keeps for the user to look at: a note that is no JSON file,
    # a record with its text under another key, a writer's temporary file never renamed.
    webchat = home / "inbox" / "webchat"
    (webchat / "note.txt").write_text(f"pin for the bank: {PIN}\n", encoding="utf-8")
    (webchat / "typo.json").write_text(json.dumps({"channel": "webchat", "sender": "maya", "txt": PIN}))
    abandoned = webchat / "late.json.part"
    abandoned.write_text(json.dumps({"channel": "webchat", "sender": "maya", "text": f"PIN {PIN}"}))
    os.utime(abandoned, (abandoned.stat().st_mtime - 3600,) * 2)
    cortex("run", home=home)
    rejected = {p.name for p in (home / "inbox" / ".rejected" / "webchat").iterdir()}
    assert {"note.txt", "typo.json", "late.json.part"} <= rejected, rejected
    recalled = cortex("recall", "bank PIN", home=home).stdout
    assert PIN in recalled  # and its snapshot is saved
    assert (home / "lance-snapshots").is_dir()
    before = files_holding(home, PIN)
    assert {"cortex.duckdb", "out/narrative.md"} <= set(before), before
    assert any(f.startswith("dagster_home/") for f in before), before
    messages = read_only(home, "SELECT count(*) FROM bus")[0][0]

    listed = cortex("erase", "--matching", PIN, home=home)
    assert "nothing erased; add --yes" in listed.stdout
    assert f"Remember that my bank PIN is {PIN}" in listed.stdout
    assert "telegram maya" in listed.stdout
    assert read_only(home, "SELECT count(*) FROM bus")[0][0] == messages
    assert files_holding(home, PIN) == before

    done = json.loads(cortex("erase", "--matching", PIN.lower(), "--yes", "--json", home=home).stdout)
    assert done["erased"] is True and done["warnings"] == []
    erased_ids = {m["id"] for m in done["messages"]}
    assert len(erased_ids) >= 2  # both messages that say it; a reply quoting it pulls its question in
    assert done["counts"]["facts"] >= 1 and done["counts"]["lancedb_episodic"] >= 2
    assert done["counts"]["published_files"] >= 1 and done["counts"]["backups_deleted"] >= 1
    assert read_only(home, "SELECT count(*) FROM bus")[0][0] == messages - len(erased_ids)

    cortex("run", home=home)
    assert files_holding(home, PIN) == []
    assert files_holding(home, "bank PIN is") == []

    hits = json.loads(cortex("recall", "bank PIN", "--json", home=home).stdout)
    assert not any(PIN.lower() in h["text"].lower() for h in hits), hits
    seats = json.loads(cortex("recall", "window seats", "--json", home=home).stdout)
    assert any("window seats" in h["text"] for h in seats), seats
    assert read_only(home, "SELECT count(*) FROM facts WHERE text ILIKE '%window seats%'")[0][0] == 1
    assert (home / "inbox" / ".ingested" / "telegram" / "batch.jsonl").read_text().count("\n") == 1

    (row,) = read_only(home, "SELECT * FROM erasures")
    columns = ("id", "erased_at", "selector", "bus_ids", "session_ids", "counts", "finished_at")
    audit = dict(zip(columns, row, strict=True))  # ids and counts: no hash of the texts, as a PIN is
    # found again by hashing every candidate
    assert audit["selector"] == "matching" and set(audit["bus_ids"]) == erased_ids
    assert audit["finished_at"] is not None
    assert PIN.lower() not in json.dumps(row, default=str).lower()
    assert cortex("doctor", home=home).returncode == 0


def test_erasing_by_id_lists_with_both_ids_until_yes(tmp_path: Path) -> None:
    """Replies and files cite turns ("msg 4"), `--message` takes bus ids: a user who erased by the
    wrong one lost another message for good. Now an id only lists, with its bus and turn ids."""
    home = tmp_path / "home"
    cortex("send", "webchat", "I prefer window seats", "--sender", "maya", home=home)
    cortex("send", "webchat", "My bank PIN is 4417", "--sender", "maya", home=home)
    cortex("run", home=home)
    listed = cortex("erase", "--message", "2", home=home).stdout
    assert "#2 (turn 3) webchat maya" in listed and "My bank PIN is 4417" in listed
    assert "nothing erased; add --yes" in listed
    assert read_only(home, "SELECT count(*) FROM bus")[0][0] == 2
    cortex("erase", "--turn", "3", "--yes", home=home)
    assert read_only(home, "SELECT text FROM bus") == [("I prefer window seats",)]


def test_erase_refuses_while_a_run_is_in_flight_and_says_how_long_one_lingers(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cortex("init", home=home)
    said = tmp_path / "one.json"
    said.write_text(json.dumps({"channel": "webchat", "text": "My bank PIN is 4417", "sender": "maya"}))
    cortex("ingest", str(said), home=home)
    with DagsterInstance.from_config(str(home / "dagster_home")) as instance:
        instance.add_run(DagsterRun(job_name="process_messages", status=DagsterRunStatus.STARTED))
    proc = cortex("erase", "--matching", "4417", "--yes", home=home, check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "lingers 120 s after its last answer" in proc.stderr and "nothing was erased" in proc.stderr
    assert read_only(home, "SELECT count(*) FROM bus")[0][0] == 1


@pytest.fixture(scope="module")
def one_pending_message(tmp_path_factory) -> Path:
    """A home holding one ingested message, made once through the CLI; each case erases in a copy."""
    home = tmp_path_factory.mktemp("erase") / "home"
    cortex("init", home=home)
    batch = home.parent / "one.json"
    batch.write_text(json.dumps({"channel": "webchat", "text": "I prefer window seats", "sender": "maya"}))
    cortex("ingest", str(batch), home=home)
    return home


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--message", "999"), "no message 999"),
        (("--turn", "998"), "no turn 998"),
        ((), "say what to erase"),
        (("--matching", "window", "--before", "2026-13-45"), "not an ISO date"),
        (("--sender", "maya", "--yes"), "not CHANNEL:SENDER_ID"),
        (("--message", "1", "--matching", "window"), "not both"),
        (("--matching", "  "), "needs some text"),
        (("--finish", "--message", "1"), "takes no selector"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    tmp_path: Path, one_pending_message: Path, args: tuple[str, ...], needle: str
) -> None:
    home = tmp_path / "home"
    shutil.copytree(one_pending_message, home)

    proc = cortex("erase", *args, home=home, check=False)
    assert proc.returncode == 2, proc
    assert proc.stderr.startswith("cortex: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert needle in proc.stderr
    assert read_only(home, "SELECT state FROM bus") == [("pending",)]
    assert read_only(home, "SELECT count(*) FROM erasures")[0][0] == 0


def _history(settings, db, *said: str | tuple[str, str]) -> list[tuple[int, int]]:
    """Past messages (text, or (text, sender)), stored without being answered: (bus id, session id)."""
    now = clock.now()
    envelopes = [(s, "maya") if isinstance(s, str) else s for s in said]
    rows = [
        validate(
            {"channel": "webchat", "text": t, "sender": who, "external_id": f"h{n}"}, settings, now, None
        )
        for n, (t, who) in enumerate(envelopes)
    ]
    db.run(import_history, rows, "test")
    return db.query("SELECT bus_id, id FROM session ORDER BY id")


def test_a_fact_with_two_sources_loses_only_the_erased_one(settings, db) -> None:
    (b1, s1), (_, s2), (_, s3), _ = _history(
        settings,
        db,
        "I prefer window seats, and my locker code is 9931-QPX",
        "Again: I prefer window seats",
        "I like green tea",
        ("Noted, the locker is yours", "bob"),  # its search text holds the turn before it
    )
    now = clock.now().replace(tzinfo=None)

    def facts(con):
        shared = fact_store.FactDraft("I prefer window seats", "preference", 2, (s1, s2), ("webchat",), now)
        only = fact_store.FactDraft("My locker code is 9931-QPX", "fact", 2, (s1,), ("webchat",), now)
        other = fact_store.FactDraft("I like green tea", "preference", 2, (s3,), ("webchat",), now)
        return [fact_store.insert(con, d) for d in (shared, only, other)]

    shared, only, other = db.run(facts)
    vectors = vector_store(settings.paths.lance)
    index_episodes(db, vectors, embedder_for(settings), settings)
    sync_facts(db, vectors, embedder_for(settings), settings)
    assert "9931-QPX" in str(vectors.table(EPISODIC).to_arrow().column("search_text"))

    done = eraser.erase(settings, eraser.selector(message_ids=[b1]))
    assert [m["id"] for m in done.messages] == [b1] and not done.warnings

    kept = db.query_dicts("SELECT id, text, sources FROM facts ORDER BY id")
    assert kept == [
        {"id": shared, "text": "I prefer window seats", "sources": [s2]},
        {"id": other, "text": "I like green tea", "sources": [s3]},
    ]
    assert db.query("SELECT count(*) FROM fact_events WHERE fact_id = ?", [only])[0][0] == 0
    assert db.query("SELECT count(*) FROM fact_events WHERE fact_id = ?", [shared])[0][0] == 1
    rows = {r["id"]: r for r in vectors.table(SEMANTIC).to_arrow().to_pylist()}
    assert set(rows) == {shared, other} and rows[shared]["sources"] == [s2]
    assert vectors.count(EPISODIC) == 3
    for path in (settings.paths.db, *settings.paths.lance.rglob("*")):
        if path.is_file():
            assert b"9931-QPX" not in path.read_bytes(), path


def test_admin_chat_lists_then_erases(settings, db) -> None:
    (b1, s1), _ = _history(settings, db, "My locker code is 9931-QPX", "I like green tea")
    chat = AdminChat(settings, OfflineClient())
    listed = chat.handle("/erase --matching 9931-qpx")
    assert f"#{b1} (turn {s1}) webchat maya" in listed and "nothing erased; add --yes" in listed
    assert chat.handle("/erase --before 2026-99-01").startswith("--before")
    assert "nothing erased; add --yes" in chat.handle(f"/erase {b1}")  # an id lists too
    assert db.query("SELECT count(*) FROM bus")[0][0] == 2
    assert "as erasure #1" in chat.handle(f"/erase {b1} --yes")
    assert db.query("SELECT text FROM bus") == [("I like green tea",)]


def test_erasing_in_one_chat_keeps_the_other_chats_summary(settings, db, tmp_path) -> None:
    ingest_history(
        settings,
        db,
        tmp_path,
        ("telegram", "My locker code is 9931-QPX, chat A.", {"metadata": {"chat_id": 111}}),
        ("telegram", "Chat B is about the Helios workshop.", {"metadata": {"chat_id": 222}}),
    )
    db.run(lambda con: con.execute("UPDATE conversations SET layer = 'foreground'"))
    compact_idle_conversations(db, settings, llm=None)
    # The summary quotes the message with its code redacted (`redact_secrets`), its words stay.
    assert "chat A" in db.query("SELECT summary FROM conversations WHERE conversation = 'telegram:111'")[0][0]
    (locker,) = db.query("SELECT id FROM bus WHERE text LIKE 'My locker%'")[0]

    eraser.erase(settings, eraser.selector(message_ids=[locker]))
    summaries = dict(db.query("SELECT conversation, summary FROM conversations"))
    assert summaries["telegram:111"] is None
    assert "helios" in summaries["telegram:222"].lower()
    assert [r[0] for r in db.query("SELECT topic FROM topic_summaries")] == ["telegram:222"]


def test_a_short_matching_text_left_in_dagster_storage_is_a_word_not_digits_of_a_timestamp(tmp_path):
    """Erasing "4417" warned that two Dagster files still held it, now and then: the digits of
    event timestamps (1795874417.25) in its run storage."""
    (tmp_path / "runs.db").write_bytes(b'{"timestamp": 1795874417.25, "run": "e4417ab"}')
    (tmp_path / "event.log").write_bytes(b"bus #3 (msg 3) webchat maya: my PIN is 4417, ok")
    assert eraser.still_holding(tmp_path, "4417") == [tmp_path / "event.log"]
    assert eraser.still_holding(tmp_path, "QZ-55") == []


def test_the_listing_names_the_pins_that_erase_deletes(tmp_path: Path) -> None:
    """A pin holding the --matching text is deleted with --yes; the listing said "no message or
    fact holds it" all the same, so the user could not see that a pin would go."""
    home = tmp_path / "home"
    cortex("init", home=home)
    cortex("pin", "I prefer window seats", home=home)
    cortex("pin", f"Locker code {PIN} at the Alvalade gym", home=home)

    listed = cortex("erase", "--matching", PIN, home=home).stdout
    assert f"pin 2: Locker code {PIN} at the Alvalade gym" in listed
    assert "nothing erased; add --yes to erase these 1 pin(s)" in listed
    assert "no message or fact holds it" not in listed
    assert len(json.loads(cortex("pins", "--json", home=home).stdout)) == 2

    done = json.loads(cortex("erase", "--matching", PIN, "--yes", "--json", home=home).stdout)
    assert done["pins"] == [{"position": 2, "text": f"Locker code {PIN} at the Alvalade gym"}]
    assert done["counts"]["pins"] == 1
    left = json.loads(cortex("pins", "--json", home=home).stdout)
    assert [p["text"] for p in left] == ["I prefer window seats"]


def test_erasing_a_stranger_keeps_the_owners_facts_and_messages_that_say_the_same(tmp_path: Path) -> None:
    """Erasing another sender's messages deleted the owner's facts with the same words (a third of
    them, erasing one group member of two years' history), though the owner's words are never
    drawn from a stranger's: only the stranger's messages and what came from them go."""
    home = tmp_path / "home"
    said = [
        ("user", "We decided to get a dog walker for Bruno.", "2026-11-01T10:00:00Z"),
        ("anna", "we decided to get a dog walker for Bruno", "2026-11-01T10:05:00Z"),
        ("user", "I really love pho.", "2026-11-02T09:00:00Z"),
        ("anna", "I really love pho.", "2026-11-03T10:00:00Z"),
    ]
    history = tmp_path / "group.jsonl"
    history.write_text(
        "".join(
            json.dumps({"channel": "telegram", "sender": who, "text": text, "timestamp": at}) + "\n"
            for who, text, at in said
        )
    )
    cortex("ingest", str(history), "--history", home=home)
    cortex("run", home=home)
    facts_before = read_only(home, "SELECT text FROM facts WHERE status = 'active' ORDER BY text")
    assert {"We decided to get a dog walker for Bruno.", "I really love pho."} <= {f[0] for f in facts_before}

    done = json.loads(cortex("erase", "--sender", "telegram:anna", "--yes", "--json", home=home).stdout)
    assert {m["sender"] for m in done["messages"]} == {"anna"}, done["messages"]
    assert done["facts"] == []
    assert read_only(home, "SELECT text FROM facts WHERE status = 'active' ORDER BY text") == facts_before
    kept = read_only(home, "SELECT sender, content FROM session WHERE role = 'user' ORDER BY id")
    assert kept == [("user", "We decided to get a dog walker for Bruno."), ("user", "I really love pho.")]


def test_erasing_a_message_of_a_short_word_and_a_long_link_takes_no_other_pin_or_message(
    tmp_path: Path,
) -> None:
    """Erasure finds copies of a long text by its first words within 80 characters: cut at the space
    before a long link, "I https://…" was quoted as "i", and every pin and reply holding an "i" went
    with it."""
    link = "https://files.example.com/shared/" + "a1b2c3d4" * 8
    home = tmp_path / "home"
    cortex("pin", "Gate code is 4412", home=home)
    cortex("pin", "Recycling goes out on Thursday", home=home)
    cortex("send", "webchat", "I prefer window seats", "--sender", "maya", home=home)
    cortex("send", "webchat", f"I {link}", "--sender", "maya", home=home)
    cortex("run", home=home)

    done = json.loads(cortex("erase", "--matching", link, "--yes", "--json", home=home).stdout)
    assert done["counts"]["pins"] == 0, done
    assert [p["text"] for p in json.loads(cortex("pins", "--json", home=home).stdout)] == [
        "Gate code is 4412",
        "Recycling goes out on Thursday",
    ]
    assert read_only(home, "SELECT text FROM bus") == [("I prefer window seats",)]


def test_an_erased_message_stays_out_when_the_same_export_is_imported_again(tmp_path: Path) -> None:
    """Re-importing a WhatsApp export had brought an erased PIN back, without a word (QA, helper-38):
    the erased message's own id stays out; no text or hash of it is kept."""
    home, export = tmp_path / "home", tmp_path / "export.jsonl"
    said = [("wa-1", f"My bank PIN is {PIN}, do not tell anyone."), ("wa-2", "Had pasta for lunch.")]
    export.write_text(
        "".join(
            json.dumps(
                {
                    "channel": "whatsapp",
                    "sender": "user",
                    "text": text,
                    "external_id": ext,
                    "timestamp": "2025-03-01T10:00:00Z",
                }
            )
            + "\n"
            for ext, text in said
        )
    )
    cortex("init", home=home)
    cortex("ingest", "--history", str(export), home=home)
    cortex("run", home=home)
    cortex("erase", "--matching", PIN, "--yes", home=home)
    again = cortex("ingest", "--history", str(export), home=home).stdout
    assert "ingested 0 message(s), 2 duplicate(s)" in again
    cortex("run", home=home)
    hits = json.loads(cortex("recall", "bank PIN", "-k", "3", "--json", home=home).stdout)
    assert not any(PIN in hit["text"] for hit in hits)
    assert files_holding(home, PIN) == []
    # A connector posting it again is told why, in one line (the gateway answers 400 with it).
    envelope = {"channel": "whatsapp", "sender": "user", "text": said[0][1], "external_id": "wa-1"}
    with pytest.raises(EnvelopeError, match=r"^message 'wa-1' on 'whatsapp' was erased"):
        ingest_message(
            json.dumps(envelope).encode(), load_settings(home), Database(home / "cortex.duckdb"), "gateway"
        )
