"""Leased delivery on a real DuckDB file: the API the gateway, the CLI and `cortex status` share."""

from __future__ import annotations

import json

import duckdb
import pytest

from cortex_pipelines import delivery
from cortex_pipelines.config import load_settings
from cortex_pipelines.ingest.envelope import EnvelopeError
from cortex_pipelines.ingest.inbox import ingest_message
from cortex_pipelines.instance import init_home, status
from cortex_pipelines.storage import Database, outbox
from cortex_pipelines.storage.migrations import MIGRATIONS
from tests.support.cli import cortex


def _ingest(settings, db, **fields) -> int:
    envelope = {"channel": "telegram", "text": "hello", "sender": "42", **fields}
    bus_id, duplicate = ingest_message(json.dumps(envelope).encode(), settings, db, "test")
    assert not duplicate
    return bus_id


def _reply(db, bus_id: int, channel: str, text: str, owners: list[str] | None = None) -> None:
    db.run(outbox.add, bus_id, channel, text, owners)


@pytest.fixture
def quick(settings):
    return load_settings(settings.home, outbox_lease_seconds=60, outbox_max_attempts=3)


def test_ingest_is_idempotent_and_speaks_the_inbox_errors(settings, db):
    body = json.dumps({"channel": "webchat", "text": "hi", "sender": "maya", "external_id": "e1"}).encode()
    first = ingest_message(body, settings, db, "test")
    assert first == (first[0], False)
    assert ingest_message(body, settings, db, "test") == (first[0], True)
    with pytest.raises(EnvelopeError, match=r"^unknown field 'bogus' \(put extra data under 'metadata'\)$"):
        ingest_message(b'{"channel": "webchat", "text": "x", "sender": "m", "bogus": 1}', settings, db, "t")
    with pytest.raises(EnvelopeError, match=r"^invalid JSON at line 1"):
        ingest_message(b"{", settings, db, "test")


def test_a_reply_carries_its_recipient_chat_thread_and_message(quick, db):
    asked = _ingest(quick, db, external_id="upd-7", thread="55", metadata={"chat_id": -1001, "message_id": 9})
    plain = _ingest(quick, db, channel="webchat", sender="maya", external_id="w1")
    _reply(db, asked, "telegram", "answer")
    _reply(db, plain, "webchat", "plain answer")
    # [[send_to:telegram]] from webchat: a new message in the owner's newest conversation there
    _reply(db, plain, "telegram", "sent elsewhere", ["42"])
    _reply(db, plain, "whatsapp", "nobody there", ["42"])
    recipients = {(r["channel"], r["text"]): r["recipient"] for r in delivery.waiting(db, quick)}
    assert recipients == {
        ("telegram", "answer"): {"chat_id": "-1001", "thread": "55", "message_id": "9"},
        ("webchat", "plain answer"): {"chat_id": "maya", "thread": None, "message_id": "w1"},
        ("telegram", "sent elsewhere"): {"chat_id": "-1001", "thread": "55", "message_id": None},
        ("whatsapp", "nobody there"): {"chat_id": None, "thread": None, "message_id": None},
    }


def test_a_lease_hides_a_reply_until_it_runs_out_and_an_ack_ends_it(quick, db, monkeypatch):
    _reply(db, _ingest(quick, db, external_id="u1"), "telegram", "one")
    (leased,) = delivery.poll(db, quick, "telegram", 20)
    assert leased["attempt"] == 1 and leased["lease_expires_at"].endswith("Z")
    assert delivery.poll(db, quick, "telegram", 20) == []
    assert delivery.poll(db, quick, "webchat", 20) == []
    assert delivery.counts(db, quick) == {"waiting": 1, "leased": 1, "dead_lettered": 0}
    monkeypatch.setenv("CORTEX_NOW", "+61s")
    (again,) = delivery.poll(db, quick, "telegram", 20)
    assert (again["id"], again["attempt"]) == (leased["id"], 2)
    assert delivery.ack(db, quick, [leased["id"]]) == 1
    assert delivery.ack(db, quick, [leased["id"]]) == 0
    monkeypatch.setenv("CORTEX_NOW", "+200s")
    assert delivery.poll(db, quick, "telegram", 20) == []
    assert delivery.counts(db, quick) == {"waiting": 0, "leased": 0, "dead_lettered": 0}


def test_poll_takes_at_most_max_oldest_first(quick, db):
    for n in range(5):
        _reply(db, _ingest(quick, db, external_id=f"m{n}"), "telegram", f"reply {n}")
    assert [m["text"] for m in delivery.poll(db, quick, "telegram", 2)] == ["reply 0", "reply 1"]
    assert [m["text"] for m in delivery.poll(db, quick, "telegram", 20)] == ["reply 2", "reply 3", "reply 4"]


def test_after_max_attempts_a_reply_is_dead_lettered_counted_and_can_be_requeued(quick, db, monkeypatch):
    _reply(db, _ingest(quick, db, external_id="u1"), "telegram", "never acked")
    for attempt in (1, 2, 3):
        monkeypatch.setenv("CORTEX_NOW", f"+{61 * attempt}s")
        assert [m["attempt"] for m in delivery.poll(db, quick, "telegram", 20)] == [attempt]
    monkeypatch.setenv("CORTEX_NOW", f"+{61 * 4}s")
    assert delivery.poll(db, quick, "telegram", 20) == []
    (dead,) = delivery.dead_letters(db)
    assert dead["text"] == "never acked" and dead["error"] == "not acknowledged after 3 deliveries"
    assert status(quick)["outbox"] == {"waiting": 0, "leased": 0, "dead_lettered": 1}
    assert delivery.requeue_dead(db, quick, None) == [dead["id"]]
    assert [m["attempt"] for m in delivery.poll(db, quick, "telegram", 20)] == [1]


def test_cortex_outbox_requeues_the_dead_letters_of_the_channel_it_names(quick, db):
    """`cortex outbox telegram --requeue-dead` puts back telegram's dead letters, not WhatsApp's
    too; asking to list and to requeue at once is bad input, and changes nothing."""
    for channel, sender in (("telegram", "42"), ("whatsapp", "+4915")):
        bus_id = _ingest(quick, db, channel=channel, sender=sender, external_id=channel)
        _reply(db, bus_id, channel, f"undeliverable on {channel}")
        (leased,) = delivery.poll(db, quick, channel, 20)
        assert delivery.dead_letter(db, quick, [leased["id"]], "chat not found") == 1

    both = cortex("outbox", "--dead", "--requeue-dead", home=quick.home, check=False)
    assert both.returncode == 2 and "choose one" in both.stderr
    assert len(delivery.dead_letters(db)) == 2

    done = cortex("outbox", "telegram", "--requeue-dead", home=quick.home)
    assert "requeued 1 dead-lettered reply(ies) on telegram" in done.stdout
    assert [m["channel"] for m in delivery.dead_letters(db)] == ["whatsapp"]
    assert [m["text"] for m in delivery.waiting(db, quick, "telegram")] == ["undeliverable on telegram"]


def test_a_connector_dead_letters_what_it_cannot_deliver(quick, db):
    _reply(db, _ingest(quick, db, external_id="u1"), "telegram", "to a blocked chat")
    (leased,) = delivery.poll(db, quick, "telegram", 20)
    assert delivery.dead_letter(db, quick, [leased["id"]], "Forbidden: bot was blocked by the user") == 1
    assert delivery.dead_letter(db, quick, [leased["id"]], "again") == 0
    assert delivery.dead_letters(db)[0]["error"] == "Forbidden: bot was blocked by the user"
    assert delivery.waiting(db, quick) == []


def test_the_file_outbox_is_a_consumer_of_the_same_state(quick, db):
    for n in range(3):
        _reply(db, _ingest(quick, db, external_id=f"f{n}"), "telegram", f"reply {n}")
    assert db.run(outbox.export_files, quick.paths) == 3
    files = sorted((quick.paths.outbox / "telegram").iterdir())
    assert json.loads(files[0].read_text())["recipient"] == {
        "chat_id": "42",
        "thread": None,
        "message_id": "f0",
    }
    files[0].unlink()  # a file consumer took it: that acknowledges it
    assert [m["text"] for m in delivery.poll(db, quick, "telegram", 1)] == ["reply 1"]
    leased = delivery.waiting(db, quick)
    assert [m["text"] for m in leased] == ["reply 1", "reply 2"]
    delivery.ack(db, quick, [leased[0]["id"]])  # acknowledged over HTTP: its file goes
    delivery.dead_letter(db, quick, [leased[1]["id"]], "blocked")
    assert not (quick.paths.outbox / "telegram").exists() or not any(
        (quick.paths.outbox / "telegram").iterdir()
    )
    assert db.run(outbox.export_files, quick.paths) == 0  # settled replies are never exported again


def test_a_version_8_database_gets_recipients_for_replies_already_waiting(tmp_path):
    home = tmp_path / "old"
    home.mkdir()
    con = duckdb.connect(str(home / "cortex.duckdb"))  # as version 8 of Cortex left it
    con.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP NOT NULL)")
    for version, statements in MIGRATIONS[:8]:
        for statement in statements:
            con.execute(statement)
        con.execute("INSERT INTO schema_version VALUES (?, now())", [version])
    con.execute(
        "INSERT INTO bus (channel, external_id, sender, text, priority, priority_rank, thread, metadata, "
        "sent_at, enqueued_at, state) VALUES ('telegram', 'u9', '42', 'hi', 'normal', 1, '7', "
        "'{\"chat_id\": -5}', now(), now(), 'completed')"
    )
    con.execute(
        "INSERT INTO outbox (bus_id, channel, text, reply_to, created_at) "
        "VALUES (1, 'telegram', 'yo', 1, now())"
    )
    con.close()
    settings = load_settings(home)
    init_home(settings)
    db = Database(settings.paths.db)
    (leased,) = delivery.poll(db, settings, "telegram", 20)
    assert leased["recipient"] == {"chat_id": "-5", "thread": "7", "message_id": "u9"}
    assert leased["attempt"] == 1


def test_a_dead_letter_turns_the_session_messages_check_red_with_its_reason(quick, db):
    """The UI shows undeliverable replies: the real check, run by Dagster after its asset."""
    from dagster import AssetCheckKey, AssetSelection, DagsterInstance, materialize

    from cortex_pipelines.assets.brain import BRAIN_CHECKS, session_messages
    from cortex_pipelines.resources import cortex_resources

    def check_once():
        with DagsterInstance.ephemeral() as instance:
            result = materialize(
                [session_messages, *BRAIN_CHECKS],
                instance=instance,
                resources=cortex_resources(str(quick.home)),
                selection=AssetSelection.checks(AssetCheckKey(session_messages.key, "no_dead_letters")),
            )
        (evaluation,) = result.get_asset_check_evaluations()
        return evaluation

    assert check_once().passed
    bus_id = _ingest(quick, db, external_id="blocked-1", metadata={"chat_id": 7})
    _reply(db, bus_id, "telegram", "you will never see this")
    (reply,) = delivery.poll(db, quick, "telegram", 10)
    delivery.dead_letter(db, quick, [reply["id"]], "Forbidden: bot was blocked by the user\nsecond line")
    red = check_once()
    assert not red.passed and red.metadata["dead_lettered"].value == 1
    assert "bot was blocked by the user second line" in red.metadata["latest"].value
