"""The Telegram connector, started by a real `cortex serve`, against a fake Bot API over real HTTP."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import httpx
import psutil
import pytest

from cortex_pipelines.storage import Database, outbox
from tests.support.dagster_dev import cli, wait_for
from tests.support.fake_telegram import FakeTelegram
from tests.support.gateway import cortex_serve

pytestmark = pytest.mark.slow

TOKEN = "123456:fake-telegram-token-9a8b7c"
OWNER = 111
STRANGER = 999
FORUM = -100500
BLOCKED = 666


@pytest.fixture
def telegram():
    with FakeTelegram(TOKEN) as fake:
        yield fake


def _env(fake: FakeTelegram) -> dict[str, str]:
    return {
        "CORTEX_TELEGRAM_TOKEN": TOKEN,
        "CORTEX_TELEGRAM_API_BASE": fake.url,
        "CORTEX_SENDER_ALLOWLIST": json.dumps({"telegram": [str(OWNER)]}),
        "CORTEX_OWNERS": f"telegram:{OWNER}",
        "CORTEX_OUTBOX_LEASE_SECONDS": "5",
    }


def _ingested(db: Database) -> list[str]:
    return [r[0] for r in db.query("SELECT external_id FROM bus WHERE channel = 'telegram' ORDER BY id")]


def _outbox(db: Database) -> dict:
    return db.run(outbox.counts)


def _reply_to(db: Database, update_id: int, text: str) -> None:
    _replies_to(db, {update_id: text})


def _replies_to(db: Database, texts: dict[int, str]) -> None:
    """Replies to these updates, committed together: the connector leases them in one poll."""

    def add(con) -> None:
        for update_id, text in texts.items():
            (bus_id,) = con.execute(
                "SELECT id FROM bus WHERE channel = 'telegram' AND external_id = ?", [str(update_id)]
            ).fetchone()
            outbox.add(con, bus_id, "telegram", text)

    db.run(add)


def _unsent(db: Database) -> list[tuple]:
    """(text, attempts, lease) of each reply still waiting."""
    return [(r["text"], r["attempts"], r["lease_expires_at"]) for r in db.run(outbox.waiting, "telegram")]


def test_messages_go_in_and_replies_come_back_in_their_chat_and_topic(tmp_path, telegram):
    home = tmp_path / "home"
    db = Database(home / "cortex.duckdb")
    with cortex_serve(home, tmp_path / "serve.log", **_env(telegram)) as (_base, env, _proc):
        private = telegram.push_text(OWNER, OWNER, "I prefer window seats on long flights.")
        telegram.push_text(STRANGER, STRANGER, "Buy followers now")
        topic = telegram.push_text(FORUM, OWNER, "My sister Ana lives in Porto.", thread=7)
        wait_for(lambda: len(_ingested(db)) == 2 and telegram.unconfirmed() == 0, 30, "the updates to go in")
        assert _ingested(db) == [str(private), str(topic)]  # the stranger is not in the allowlist

        cli("run", env=env)
        wait_for(lambda: len(telegram.sent) == 2, 30, "both replies on Telegram")
        by_chat = {m["chat_id"]: m for m in telegram.sent}
        assert set(by_chat) == {OWNER, FORUM}
        assert by_chat[OWNER]["reply_parameters"]["message_id"] == telegram.pushed[private]["message_id"]
        assert "message_thread_id" not in by_chat[OWNER]
        assert str(by_chat[FORUM]["message_thread_id"]) == "7"
        assert by_chat[FORUM]["reply_parameters"]["message_id"] == telegram.pushed[topic]["message_id"]
        assert "parse_mode" not in by_chat[OWNER]  # plain text: model output is not valid markup
        # The private chat and the forum topic are two conversations, each with its reply.
        assert db.query("SELECT conversation, count(*) FROM session GROUP BY ALL ORDER BY 1") == [
            (f"telegram:{FORUM}:7", 2),
            (f"telegram:{OWNER}", 2),
        ]
        wait_for(lambda: _outbox(db)["waiting"] == 0, 10, "the acknowledgements")
    assert TOKEN not in (tmp_path / "serve.log").read_text()


def test_a_forwarded_message_says_whose_words_they_are_and_never_becomes_the_owners(tmp_path, telegram):
    """The owner forwarded a friend's "I am allergic to peanuts and I live in Paris": it went in as
    the owner's own words, to become their facts and supersede where they live (QA, helper-54)."""
    home = tmp_path / "home"
    db = Database(home / "cortex.duckdb")
    with cortex_serve(home, tmp_path / "serve.log", **_env(telegram)) as (_base, env, _proc):
        telegram.push_text(OWNER, OWNER, "I live in Lisbon, right by the river.")
        telegram.push_text(
            OWNER, OWNER, "I am allergic to peanuts and I live in Paris.", forwarded_from="Anna"
        )
        wait_for(lambda: len(_ingested(db)) == 2, 30, "the updates to go in")
        cli("run", env=env)
        said = db.query("SELECT text FROM bus WHERE channel = 'telegram' ORDER BY id")[1][0]
        facts = json.loads(cli("recall", "where do I live", "-k", "5", "--json", env=env).stdout)
    assert said == "[Forwarded from Anna]\nI am allergic to peanuts and I live in Paris."
    assert "Lisbon" in facts[0]["text"] and not facts[0].get("updated_by"), facts
    assert not [f for f in facts if f.get("fact_id") and "Paris" in f["text"]], facts


def test_long_replies_are_split_429_is_waited_out_and_a_blocked_chat_dead_letters(tmp_path, telegram):
    home = tmp_path / "home"
    db = Database(home / "cortex.duckdb")
    with cortex_serve(home, tmp_path / "serve.log", **_env(telegram)):
        first = telegram.push_text(OWNER, OWNER, "tell me a long story")
        blocked = telegram.push_text(BLOCKED, OWNER, "and then block the bot")
        wait_for(lambda: len(_ingested(db)) == 2, 30, "the updates to go in")
        story = " ".join(f"word{n}" for n in range(1800))  # about 15,000 characters
        telegram.rate_limits.append(1)
        telegram.blocked_chats.add(BLOCKED)
        started = time.monotonic()
        _reply_to(db, first, story)
        _reply_to(db, blocked, "you will not see this")
        wait_for(lambda: _outbox(db)["waiting"] == 0, 30, "the replies to settle")
        parts = telegram.sent_texts()
        assert len(parts) == 4 and all(len(p) <= 4096 for p in parts)
        assert "".join(parts) == story
        assert telegram.sent[0]["at"] - started >= 1.0  # the 429's retry_after was honoured
        assert _outbox(db) == {"waiting": 0, "leased": 0, "dead_lettered": 1}
        (dead,) = db.run(outbox.dead_letters)
        assert dead["text"] == "you will not see this" and "blocked" in dead["error"]


def test_a_restart_loses_nothing_and_doubles_nothing(tmp_path, telegram):
    home = tmp_path / "home"
    db = Database(home / "cortex.duckdb")
    log = tmp_path / "serve.log"
    updates = []
    with cortex_serve(home, log, **_env(telegram)) as (_base, _, proc):
        updates += [telegram.push_text(OWNER, OWNER, f"before {n}") for n in range(3)]
        wait_for(lambda: len(_ingested(db)) == 3, 30, "the first updates")
        _reply_to(db, updates[0], "reply one")
        wait_for(lambda: telegram.sent_texts() == ["reply one"], 30, "the first reply")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0

    updates += [telegram.push_text(OWNER, OWNER, f"while down {n}") for n in range(2)]
    _reply_to(db, updates[1], "reply two")  # committed while no connector runs
    with cortex_serve(home, tmp_path / "serve2.log", **_env(telegram)) as (_base, _, proc):
        wait_for(lambda: len(_ingested(db)) == 5, 30, "the updates sent while it was down")
        wait_for(lambda: len(telegram.sent) == 2, 30, "the reply committed while it was down")
        (connector,) = psutil.Process(proc.pid).children()
        connector.kill()  # SIGKILL: no drain; `cortex serve` restarts it
        updates.append(telegram.push_text(OWNER, OWNER, "after the crash"))
        _reply_to(db, updates[2], "reply three")
        wait_for(lambda: len(_ingested(db)) == 6 and len(telegram.sent) == 3, 60, "the restarted connector")
        time.sleep(1.5)  # a doubled update or reply would show by now
        assert _ingested(db) == [str(u) for u in updates]
        assert telegram.sent_texts() == ["reply one", "reply two", "reply three"]
        assert _outbox(db)["waiting"] == 0
    assert "restarting" in (tmp_path / "serve2.log").read_text()


def test_a_drain_gives_back_the_replies_it_leased_but_did_not_send(tmp_path, telegram):
    """SIGTERM finished the reply being sent and left the rest of its poll batch leased: after a
    restart they waited out their lease (60 s), and the lease counted an attempt."""
    home = tmp_path / "home"
    db = Database(home / "cortex.duckdb")
    env = {**_env(telegram), "CORTEX_OUTBOX_LEASE_SECONDS": "60"}
    with cortex_serve(home, tmp_path / "serve.log", **env) as (_base, _, proc):
        updates = [telegram.push_text(OWNER, OWNER, f"question {n}") for n in range(3)]
        wait_for(lambda: len(_ingested(db)) == 3, 30, "the updates to go in")
        telegram.late_answers.append(6.0)  # the first reply is still being sent when SIGTERM comes
        _replies_to(db, {update: f"reply {n}" for n, update in enumerate(updates)})
        wait_for(lambda: len(telegram.sent) == 1, 30, "the first reply to be on its way")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert telegram.sent_texts() == ["reply 0"]
    assert _unsent(db) == [("reply 1", 0, None), ("reply 2", 0, None)]


def test_a_stop_while_a_429_is_waited_out_ends_at_once_and_gives_the_replies_back(tmp_path, telegram):
    """A 429's retry_after (minutes, at times) was slept through: SIGTERM then took the whole grace
    `cortex serve` gives a connector (30 s) and still left the replies leased."""
    home = tmp_path / "home"
    db = Database(home / "cortex.duckdb")
    log = tmp_path / "serve.log"
    env = {**_env(telegram), "CORTEX_OUTBOX_LEASE_SECONDS": "60"}
    with cortex_serve(home, log, **env) as (_base, _, proc):
        updates = [telegram.push_text(OWNER, OWNER, f"question {n}") for n in range(2)]
        wait_for(lambda: len(_ingested(db)) == 2, 30, "the updates to go in")
        telegram.rate_limits.append(120)
        _replies_to(db, {update: f"reply {n}" for n, update in enumerate(updates)})
        wait_for(lambda: "waiting 120 s" in log.read_text(), 30, "the 429 to be waited out")
        asked = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        took = time.monotonic() - asked
    assert took < 15, f"stopping took {took:.0f} s"  # before: the whole 30 s grace
    assert telegram.sent == []
    assert _unsent(db) == [("reply 0", 0, None), ("reply 1", 0, None)]


def test_a_reply_cut_off_by_a_crash_resumes_after_the_parts_already_sent(tmp_path, telegram):
    home = tmp_path / "home"
    db = Database(home / "cortex.duckdb")
    with cortex_serve(home, tmp_path / "serve.log", **_env(telegram)) as (_base, _, proc):
        update = telegram.push_text(OWNER, OWNER, "tell me a long story")
        wait_for(lambda: len(_ingested(db)) == 1, 30, "the update to go in")
        story = " ".join(f"word{n}" for n in range(1200))  # three parts
        telegram.hold_sends_after = 1  # Telegram takes the first part, then the connector is killed
        _reply_to(db, update, story)
        wait_for(lambda: telegram.held == 1, 30, "the second part to be on its way")
        (connector,) = psutil.Process(proc.pid).children()
        connector.kill()  # SIGKILL before the reply is acknowledged: its lease brings it back
        telegram.release_held()
        wait_for(lambda: _outbox(db)["waiting"] == 0, 60, "the restarted connector to finish the reply")
        parts = telegram.sent_texts()
        assert len(parts) == 3, "the part sent before the crash must not be sent again"
        assert "".join(parts) == story


def test_a_reply_whose_answer_comes_late_is_sent_once(tmp_path, telegram):
    home = tmp_path / "home"
    db = Database(home / "cortex.duckdb")
    log = tmp_path / "serve.log"
    env = {**_env(telegram), "CORTEX_TELEGRAM_SEND_TIMEOUT": "1"}
    with cortex_serve(home, log, **env):
        update = telegram.push_text(OWNER, OWNER, "are you there?")
        wait_for(lambda: len(_ingested(db)) == 1, 30, "the update to go in")
        telegram.late_answers.append(7.0)  # delivered at once, answered after the connector gave up
        _reply_to(db, update, "yes, here")
        wait_for(lambda: _outbox(db)["waiting"] == 0, 30, "the reply to be acknowledged")
        time.sleep(7)  # past the late answer and a lease (5 s): a resent copy would show by now
        assert telegram.sent_texts() == ["yes, here"]
        assert _outbox(db) == {"waiting": 0, "leased": 0, "dead_lettered": 0}
    assert "counted as sent, not sent again" in log.read_text()


def test_a_reply_after_a_restore_is_sent_though_its_outbox_id_was_used_before(tmp_path, telegram):
    home = tmp_path / "home"
    db = Database(home / "cortex.duckdb")
    with cortex_serve(home, tmp_path / "serve.log", **_env(telegram)) as (_base, env, _proc):
        cli("status", env=env)  # a backup of the home with no replies yet
        first = telegram.push_text(OWNER, OWNER, "first")
        wait_for(lambda: len(_ingested(db)) == 1, 30, "the update to go in")
        _reply_to(db, first, "reply before the restore")
        wait_for(lambda: _outbox(db)["waiting"] == 0, 30, "the first reply")
    cli("doctor", "--restore", "--yes", env=env)  # the outbox ids used since are free again
    with cortex_serve(home, tmp_path / "serve2.log", **_env(telegram)):
        second = telegram.push_text(OWNER, OWNER, "second, after the restore")
        wait_for(lambda: str(second) in _ingested(db), 30, "the update to go in")
        _reply_to(db, second, "reply after the restore")
        wait_for(lambda: _outbox(db)["waiting"] == 0, 30, "the new reply")
        assert telegram.sent_texts() == ["reply before the restore", "reply after the restore"]


def test_invisible_characters_are_neutralized_and_a_refused_update_is_kept_and_counted(tmp_path, telegram):
    home = tmp_path / "home"
    db = Database(home / "cortex.duckdb")
    env = {**_env(telegram), "CORTEX_MAX_TEXT_BYTES": "200"}
    with cortex_serve(home, tmp_path / "serve.log", **env) as (_base, env, _proc):
        isolated = telegram.push_text(OWNER, OWNER, "Meet \u2068Ana\u2069 at \u20665\u2069 pm")
        vtab = telegram.push_text(OWNER, OWNER, "line one\x0bline two")
        too_long = telegram.push_text(OWNER, OWNER, "x" * 300)
        after = telegram.push_text(OWNER, OWNER, "and this one goes in")
        wait_for(lambda: telegram.unconfirmed() == 0 and len(_ingested(db)) == 3, 30, "the updates")
        assert _ingested(db) == [str(isolated), str(vtab), str(after)]
        texts = [r[0] for r in db.query("SELECT text FROM bus WHERE channel = 'telegram' ORDER BY id")]
        assert texts[:2] == ["Meet Ana at 5 pm", "line one\nline two"]
        # The refused one is kept with its reason, where `cortex status` counts it.
        (note,) = (home / "inbox" / ".rejected" / "telegram").glob("*.error")
        assert "over the 200-byte limit" in note.read_text()
        kept = json.loads(note.with_suffix("").read_text())
        assert kept["external_id"] == str(too_long) and kept["text"] == "x" * 300
        assert "1 file(s) rejected" in cli("status", env=env).stdout


def test_an_outage_longer_than_the_attempts_dead_letters_nothing(tmp_path, telegram):
    home = tmp_path / "home"
    db = Database(home / "cortex.duckdb")
    env = {**_env(telegram), "CORTEX_OUTBOX_LEASE_SECONDS": "1", "CORTEX_OUTBOX_MAX_ATTEMPTS": "2"}
    with cortex_serve(home, tmp_path / "serve.log", **env):
        update = telegram.push_text(OWNER, OWNER, "remind me later")
        wait_for(lambda: len(_ingested(db)) == 1, 30, "the update to go in")
        telegram.send_outage = True
        _reply_to(db, update, "[queued] sent once Telegram is back")
        time.sleep(8)  # eight leases: four times the attempts a reply has
        assert _outbox(db)["dead_lettered"] == 0
        assert telegram.calls.count("sendMessage") >= 3  # it kept trying
        telegram.send_outage = False
        wait_for(lambda: _outbox(db)["waiting"] == 0, 40, "the reply once Telegram is back")
        assert telegram.sent_texts() == ["[queued] sent once Telegram is back"]
        assert _outbox(db) == {"waiting": 0, "leased": 0, "dead_lettered": 0}


def test_a_connector_refused_for_good_is_said_by_health_and_cortex_status(tmp_path):
    """A wrong bot token stops the connector for good ("not restarting"), and /health still said
    "ok" while `cortex status` said nothing: the bot just never answered (QA, helper-54)."""
    home = tmp_path / "home"
    with (
        FakeTelegram("999:another-bots-token") as other,
        cortex_serve(home, tmp_path / "serve.log", **_env(other)) as (base, env, _proc),
    ):
        degraded = lambda: httpx.get(f"{base}/health").json()["status"] == "degraded"  # noqa: E731
        wait_for(degraded, 30, "the connector to stop")
        health = httpx.get(f"{base}/health").json()
        status = cli("status", env=env)
        report = json.loads(cli("status", "--json", env=env).stdout)
    assert health["connectors"]["telegram"].startswith("stopped: exited with status 2 (bad configuration)")
    assert "connector telegram: stopped: exited with status 2" in status.stderr
    assert report["connectors"]["telegram"] == health["connectors"]["telegram"]
    assert TOKEN not in status.stdout + status.stderr
    assert json.loads(cli("status", "--json", env=env).stdout)["connectors"] == {}  # its gateway is gone


def test_a_reply_that_keeps_failing_while_telegram_answers_is_left_to_its_lease(tmp_path):
    """A reply Telegram answers with a 5xx every time (while getUpdates answers) was given back
    uncounted after every pause, first in line for ever, holding up every reply behind it (review,
    helper-58). After FAILING_ALONE_AFTER_S of that, its lease counts and it dead-letters in time."""
    from cortex_pipelines.config import load_settings
    from cortex_pipelines.connectors.telegram import FAILING_ALONE_AFTER_S, TelegramConnector

    settings = load_settings(tmp_path / "home", telegram_token=TOKEN, ingest_api_key="k" * 16)
    said = []
    connector = TelegramConnector(settings, "http://127.0.0.1:9", say=said.append)
    assert not connector._fails_alone(7)  # an outage, until Telegram is seen answering
    connector.reachable_at = connector.failing_since[7] + FAILING_ALONE_AFTER_S / 2
    assert not connector._fails_alone(7)
    connector.reachable_at = connector.failing_since[7] + FAILING_ALONE_AFTER_S + 1
    assert connector._fails_alone(7) and "reply 7 keeps failing" in said[-1]


def test_replies_that_cannot_be_given_back_on_a_stop_are_said_and_left_to_their_lease(tmp_path):
    """A gateway already gone when the connector stops: one line, and the stop goes on."""
    from cortex_pipelines.config import load_settings
    from cortex_pipelines.connectors.gateway_client import GatewayClient
    from cortex_pipelines.connectors.telegram import TelegramConnector

    settings = load_settings(tmp_path / "home", telegram_token=TOKEN, ingest_api_key="k" * 16)
    said = []
    connector = TelegramConnector(settings, "http://127.0.0.1:9", say=said.append)

    async def stop_with_the_gateway_gone() -> None:
        async with GatewayClient(connector.gateway_url, connector.key) as gateway:
            await connector._give_back_before_exit(gateway, [3, 4])

    asyncio.run(stop_with_the_gateway_gone())
    assert said == [
        "telegram: could not give back 2 unsent reply(ies) (ConnectError); they wait out their lease"
    ]


def test_a_gateway_gone_as_the_connector_stops_is_not_said_to_be_retried(tmp_path):
    """`cortex serve` stopping its gateway under a connector that was polling it: the log said
    "gateway unavailable; retrying in 1 s" just before the connector exited (helper-59)."""
    from cortex_pipelines.config import load_settings
    from cortex_pipelines.connectors.telegram import TelegramConnector

    settings = load_settings(tmp_path / "home", telegram_token=TOKEN, ingest_api_key="k" * 16)
    said = []
    connector = TelegramConnector(settings, "http://127.0.0.1:9", say=said.append)

    class GoneAsTheStopComes:
        async def poll(self, channel: str, limit: int) -> list[dict]:
            connector.stopping.set()
            raise httpx.ConnectError("connection refused")

    asyncio.run(asyncio.wait_for(connector._outbound(None, GoneAsTheStopComes()), 10))
    assert said == ["telegram: gateway unavailable while stopping (ConnectError)"]
