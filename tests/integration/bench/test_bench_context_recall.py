"""bench.context_recall end to end on a tiny conversation, through the real inbox, brain and recall:
evidence counts only when the assembled prompt shows it, and a question is never recorded."""

from __future__ import annotations

from bench.context_recall import score_questions, stream, summary


def session(speakers_lines: list[tuple[str, str]], n: int) -> list[dict]:
    return [
        {"speaker": speaker, "dia_id": f"D{n}:{i}", "text": text}
        for i, (speaker, text) in enumerate(speakers_lines, start=1)
    ]


SAMPLE = {
    "sample_id": "tiny",
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_1_date_time": "10:00 am on 8 May, 2023",
        "session_1": session(
            [
                ("Ann", "Morning Bo! How was your weekend?"),
                ("Bo", "Great, I went hiking near the lake with my sister."),
                ("Ann", "We adopted a beagle puppy and named him Biscuit."),
                ("Bo", "Aw, what a cute little dog!"),
                ("Ann", "He chews everything, especially my slippers."),
            ],
            1,
        ),
        "session_2_date_time": "4:00 pm on 20 June, 2023",
        "session_2": session(
            [
                ("Bo", "I started pottery classes on Tuesdays."),
                ("Ann", "That sounds relaxing. I have been busy painting the kitchen."),
                ("Bo", "Which colour did you choose?"),
                ("Ann", "A pale sage green for the kitchen walls."),
                ("Bo", "Nice, send me a photo when it is done."),
            ],
            2,
        ),
    },
    "qa": [
        {"question": "What is the name of Ann's beagle puppy?", "evidence": ["D1:3"], "category": 4},
        {"question": "What colour did Ann paint the kitchen walls?", "evidence": ["D2:4"], "category": 4},
        {"question": "What should Bo send when it is done?", "evidence": ["D2:5"], "category": 4},
        {"question": "Who wrote this?", "evidence": [], "category": 5},
    ],
}
TOO_SMALL = 15  # tokens: no recalled line and only the newest raw turn fit


def test_evidence_counts_when_the_prompt_shows_it(tmp_path, monkeypatch):
    # Registered so the teardown removes what the benchmark sets in os.environ.
    monkeypatch.setenv("CORTEX_LLM_PROVIDER", "offline")
    monkeypatch.setenv("CORTEX_OWNERS", "{}")
    monkeypatch.setenv("CORTEX_NOW", "+0s")
    monkeypatch.setenv("CORTEX_FOREGROUND_MAX_MESSAGES", "4")  # the evidence must come from recall
    conv = stream(SAMPLE, tmp_path / "home")
    before = conv.db.query("SELECT count(*) FROM session")[0][0]
    assert before == 20  # ten turns, ten replies

    dog, kitchen, last = score_questions(conv, SAMPLE, budgets=(TOO_SMALL, 2000))
    assert conv.db.query("SELECT count(*) FROM session")[0][0] == before  # the questions left no turn
    for record in (dog, kitchen):
        assert record["context_recall"]["foreground"][0] == 0.0  # said before the last two turns
        assert record["context_recall"]["cortex"] == {TOO_SMALL: 0.0, 2000: 1.0}, record["question"]
        assert record["tokens"]["cortex"][TOO_SMALL]["block"] == 0
        assert 0 < record["tokens"]["cortex"][2000]["block"] <= 2000
        assert record["context_recall"]["recency"] == {TOO_SMALL: 0.0, 2000: 1.0}
        assert record["context_recall"]["bm25"][2000] == 1.0
    assert last["context_recall"]["foreground"][0] == 1.0  # the newest turn is in the foreground
    assert last["context_recall"]["cortex"] == {TOO_SMALL: 1.0, 2000: 1.0}
    assert summary([dog, kitchen, last])["cortex"][2000]["overall"] == 100.0
