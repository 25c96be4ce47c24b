"""A schedule's firing text fits the bus's size limit however the job's action is cut."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cortex_pipelines.proactive.schedules import _firing_text

JOB = {"id": "sch-0123abcd", "description": "water the plants"}
DUE = datetime(2026, 3, 28, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize("action", ["ä" * 3000, "x" * 3000, "🌱" * 1000])
def test_a_long_action_is_cut_to_the_limit_on_a_character_boundary(action):
    text = _firing_text({**JOB, "action": action}, DUE, late=False, missed=0, max_bytes=2048)
    assert len(text.encode()) <= 2048
    assert text.endswith("…") and text.startswith("Scheduled job sch-0123abcd (water the plants) is due")
    text.encode().decode()  # whole characters only


def test_an_action_that_fits_is_kept_whole():
    text = _firing_text({**JOB, "action": "Water them."}, DUE, late=True, missed=2, max_bytes=2048)
    assert text.endswith("\nAction: Water them.") and "2 earlier firing(s)" in text
