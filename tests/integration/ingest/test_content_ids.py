"""A message that comes without an external id is known by its content id: its words, and what says
where it belongs or what it answers (chat, connector message, op, reply_to). Two different messages
with the same words are two messages (QA: a second op's "No results found.", a result re-sent with
the op_id it was asked for, a second chat's "yes" were each dropped as a duplicate), while the same
file dropped twice, before or after the upgrade, is still one. Through the real `cortex`."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import httpx
import pytest

from tests.support.cli import cortex
from tests.support.gateway import AUTH, cortex_serve
from tests.support.stores import read_only

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

NO_RESULTS = "No results found."


def _drop(home: Path, name: str, envelope: dict) -> None:
    """Written as a connector does: a temporary name, then a rename."""
    folder = home / "inbox" / envelope["channel"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f".{name}.tmp").write_text(json.dumps(envelope), encoding="utf-8")
    (folder / f".{name}.tmp").rename(folder / f"{name}.json")


def _run(home: Path, *, accepted: int, duplicates: int) -> str:
    out = cortex("run", home=home).stdout
    assert f"ingested {accepted} message(s), {duplicates} duplicate(s)" in out, out
    return out


def _old_content_id(env: dict) -> str:
    """The id the code before this change gave a message without one (no metadata in it)."""
    basis = [env["channel"], env["sender"], env["text"], env.get("timestamp"), env.get("thread")]
    return "sha256:" + hashlib.sha256(json.dumps(basis, ensure_ascii=False).encode()).hexdigest()[:32]


def _delegate(home: Path, *requests: str) -> list[str]:
    """Ops the offline brain hands off for these requests, in order."""
    cortex("init", home=home)
    for text in requests:
        cortex("send", "webchat", text, "--sender", "maya", home=home)
    _run(home, accepted=len(requests), duplicates=0)
    sent = sorted(json.loads(cortex("outbox", "--json", home=home).stdout), key=lambda r: r["id"])
    return [re.search(r"op-[0-9a-f]+", r["text"]).group(0) for r in sent]


def _ops(home: Path) -> dict[str, str]:
    return dict(read_only(home, "SELECT id, status || ': ' || coalesce(result, '') FROM pending_ops"))


def _result(op: dict) -> dict:
    return {"channel": "router", "sender": "router", "text": NO_RESULTS, "metadata": op}


def test_two_ops_with_the_same_result_text_are_both_completed(tmp_path):
    home = tmp_path / "home"
    first, second = _delegate(home, "Can you research cafés near Alfama?", "Can you research a dentist?")
    _drop(home, "r1", _result({"op_id": first}))
    _drop(home, "r2", _result({"op_id": second}))
    _run(home, accepted=2, duplicates=0)
    assert _ops(home) == {first: f"completed: {NO_RESULTS}", second: f"completed: {NO_RESULTS}"}


@pytest.mark.soak
def test_a_refused_result_resent_with_its_exact_op_id_completes_the_op(tmp_path):
    home = tmp_path / "home"
    cafes, dentist = _delegate(
        home, "Can you research cafés in Lisbon?", "Can you research a dentist in Lisbon?"
    )
    text = "Result: Café Lisboa, Rua Augusta 5."
    _drop(
        home, "r1", {"channel": "router", "sender": "router", "text": text, "metadata": {"op_ref": "Lisbon"}}
    )
    _run(home, accepted=1, duplicates=0)
    ((refusal,),) = read_only(home, "SELECT text FROM outbox WHERE channel = 'router'")
    assert "matches 2 open operations" in refusal and "name the op by its exact op_id" in refusal
    _drop(
        home,
        "r1-again",
        {"channel": "router", "sender": "router", "text": text, "metadata": {"op_id": cafes}},
    )
    _run(home, accepted=1, duplicates=0)
    assert _ops(home) == {cafes: f"completed: {text}", dentist: "pending: "}


def test_the_same_words_in_a_second_chat_are_a_message_of_their_own(tmp_path):
    home = tmp_path / "home"
    cortex("init", home=home)
    yes = {"channel": "telegram", "sender": "u", "text": "yes"}
    _drop(home, "chat1", {**yes, "metadata": {"chat_id": "1"}})
    _run(home, accepted=1, duplicates=0)
    _drop(home, "chat2", {**yes, "metadata": {"chat_id": "2"}})
    _run(home, accepted=1, duplicates=0)
    said = read_only(home, "SELECT metadata->>'chat_id', text FROM bus ORDER BY id")
    assert said == [("1", "yes"), ("2", "yes")]


def test_the_same_file_dropped_twice_is_one_message(tmp_path):
    home = tmp_path / "home"
    cortex("init", home=home)
    in_chat = {"channel": "telegram", "sender": "u", "text": "yes", "metadata": {"chat_id": 7}}
    plain = {"channel": "webchat", "sender": "maya", "text": "hello", "timestamp": "2026-01-05T10:00:00Z"}
    _drop(home, "a", {**in_chat, "metadata": {**in_chat["metadata"], "chat_type": "private"}})
    _drop(home, "b", {**plain, "metadata": {"note": "first"}})
    _run(home, accepted=2, duplicates=0)
    # Again, with only metadata that says nothing of where they belong changed (and 7 as "7").
    _drop(home, "a-again", {**in_chat, "metadata": {"chat_id": "7", "chat_type": "group"}})
    _drop(home, "b-again", {**plain, "metadata": {"note": "second"}})
    _run(home, accepted=0, duplicates=2)
    ids = dict(read_only(home, "SELECT text, external_id FROM bus"))
    # With none of those keys, a message keeps the very id it had before they counted.
    assert ids["hello"] == _old_content_id(plain)
    assert ids["yes"].startswith("sha256:") and ids["yes"] != _old_content_id(in_chat)


def _stored_the_old_way(home: Path, envelope: dict) -> None:
    """The row the code before this change stored for the envelope: its id made from the content
    alone, given explicitly (`cortex ingest`, a bulk import of a file)."""
    path = home.parent / f"old-{len(list(home.parent.glob('old-*')))}.json"
    path.write_text(json.dumps({**envelope, "external_id": _old_content_id(envelope)}), encoding="utf-8")
    cortex("ingest", str(path), home=home)


def test_a_message_stored_before_the_upgrade_is_still_a_duplicate(tmp_path):
    home = tmp_path / "home"
    cortex("init", home=home)
    yes = {"channel": "telegram", "sender": "u", "text": "yes"}
    chat1 = {**yes, "metadata": {"chat_id": "1"}}
    _stored_the_old_way(home, chat1)
    # The very file again after the upgrade is that message; the same words from chat 2 are not.
    _drop(home, "chat1", chat1)
    _drop(home, "chat2", {**yes, "metadata": {"chat_id": "2"}})
    _run(home, accepted=1, duplicates=1)
    said = read_only(home, "SELECT metadata->>'chat_id', external_id FROM bus ORDER BY id")
    assert [chat for chat, _ in said] == ["1", "2"] and said[0][1] == _old_content_id(chat1)
    _drop(home, "chat2-again", {**yes, "metadata": {"chat_id": "2"}})
    _run(home, accepted=0, duplicates=1)


def test_post_ingest_knows_a_message_stored_before_the_upgrade(tmp_path):
    home = tmp_path / "home"
    cortex("init", home=home)
    chat1 = {"channel": "telegram", "sender": "u", "text": "yes", "metadata": {"chat_id": "1"}}
    chat2 = {**chat1, "metadata": {"chat_id": "2"}}
    _stored_the_old_way(home, chat1)
    ((old_id,),) = read_only(home, "SELECT id FROM bus")
    with cortex_serve(home, tmp_path / "serve.log") as (base, _, _):
        again = httpx.post(f"{base}/ingest", json=chat1, headers=AUTH)
        second = httpx.post(f"{base}/ingest", json=chat2, headers=AUTH)
        second_again = httpx.post(f"{base}/ingest", json=chat2, headers=AUTH)
    assert (again.status_code, again.json()) == (200, {"id": old_id, "duplicate": True}), again.text
    assert second.status_code == 202 and second.json()["id"] != old_id, second.text
    assert (second_again.status_code, second_again.json()) == (
        200,
        {"id": second.json()["id"], "duplicate": True},
    )


def test_a_result_skipped_while_the_router_was_off_is_put_back_by_cortex_retry(tmp_path):
    """A result that came while `router` was off was skipped, and nothing could bring it back:
    `cortex retry` said "is skipped, not failed", and dropping it again was a duplicate (QA, helper-48)."""
    home = tmp_path / "home"
    (op,) = _delegate(home, "Can you research a plumber near Graça?")
    _drop(home, "r1", _result({"op_id": op}))
    off = {"CORTEX_CHANNEL_MODES": '{"router": "off"}'}
    cortex("run", home=home, env=off)
    (skipped,) = read_only(home, "SELECT id FROM bus WHERE state = 'skipped'")[0]
    assert _ops(home) == {op: "pending: "}
    waiting = json.loads(cortex("status", "--json", home=home).stdout)["ops"]  # `cortex status` shows it
    assert (waiting["pending"], waiting["completed"]) == (1, 0) and waiting["next_deadline"], waiting
    said = cortex("retry", str(skipped), home=home, env=off).stdout
    assert said.strip() == f"requeued 1 message(s): {skipped}"
    cortex("run", home=home)  # the router on again
    assert _ops(home) == {op: f"completed: {NO_RESULTS}"}
    shown = cortex("status", home=home).stdout
    assert "delegated pending 0  completed 1  failed 0  archived 0" in shown, shown
    wrong = cortex("retry", str(skipped), home=home, check=False)
    assert wrong.returncode == 2 and "is completed, not failed or skipped" in wrong.stderr


def test_a_result_naming_no_op_is_told_so_not_noted(tmp_path):
    """A router result without op_id or op_ref was answered "Noted.", which read as taken (QA, helper-48)."""
    home = tmp_path / "home"
    (op,) = _delegate(home, "Can you research a tailor near Chiado?")
    _drop(home, "r1", {"channel": "router", "sender": "router", "text": "Result: Alfaiate Lisboa."})
    cortex("run", home=home)
    (reply,) = json.loads(cortex("outbox", "router", "--json", home=home).stdout)
    assert reply["text"].startswith("Not recorded as a result: it names no op"), reply
    assert _ops(home) == {op: "pending: "}


@pytest.mark.soak
def test_a_result_after_the_deadline_reaches_the_owner_who_was_told_it_failed(tmp_path):
    """Supervision fails an op at its deadline and the owner is told; a result that came an hour
    later had gone only to the router, "this result completed nothing" (QA, helper-48)."""
    home = tmp_path / "home"
    (op,) = _delegate(home, "Can you research hotels near Belém?")
    cortex("--now", "+25h", "run", home=home)  # past its deadline: failed by supervision
    assert _ops(home)[op].startswith("failed")
    _drop(home, "r1", {**_result({"op_id": op}), "text": "Result: Hotel Jerónimo, 90 euros."})
    cortex("--now", "+26h", "run", home=home)
    told = [r["text"] for r in json.loads(cortex("outbox", "webchat", "--json", home=home).stdout)]
    late = [t for t in told if t.startswith("A late result for your delegated task")]
    assert len(late) == 1 and late[0].endswith("Result: Hotel Jerónimo, 90 euros."), told
    assert _ops(home)[op].startswith("failed")  # a closed op is never reopened
