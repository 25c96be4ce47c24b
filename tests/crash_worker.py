"""A processing process that SIGKILLs itself at a chosen point (helper for test_crash_durability).

    python tests/crash_worker.py HOME KILL_POINT N [CALL]

HOME is a CORTEX_HOME. The worker drains the bus with the offline LLM and kills itself with
SIGKILL (no cleanup, no finally blocks, no atexit) on the N-th message it processes:

  before_llm                 inside client.complete, before the offline client is asked
  after_llm                  after the offline client answered, before complete() returns
  before_commit              in Brain._commit (inside the open transaction), before any write
  mid_commit                 in Brain._commit right after bus.mark_completed, before COMMIT
  after_commit               right after Brain._process returned (the commit is durable)
  between_outbox_and_export  drain(max_messages=N), killed as export_files starts
  mid_export                 drain(max_messages=N), killed after export_files wrote one file

For before_llm/after_llm, CALL (default 1) picks which LLM call of that message: a message that
used a tool makes two, so "before_llm N 2" dies after the tool ran and before the second call.

Exit status: killed by SIGKILL (-9 to the parent) when the point was reached; 3 when the drain
finished without reaching it.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

KILL_POINTS = (
    "before_llm",
    "after_llm",
    "before_commit",
    "mid_commit",
    "after_commit",
    "between_outbox_and_export",
    "mid_export",
)
# Points at which the killed message is still 'processing' (the next drain recovers it).
MID_MESSAGE = frozenset({"before_llm", "after_llm", "before_commit", "mid_commit"})
# Points that stop a drain of N messages during its final outbox export.
EXPORT_POINTS = frozenset({"between_outbox_and_export", "mid_export"})


def die(reason: str) -> None:
    sys.stderr.write(f"crash_worker: SIGKILL {reason}\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class CountingClient:
    """Wraps the offline client, counts calls, and dies at before_llm/after_llm."""

    def __init__(self, inner, state: dict, kill_point: str, n: int, call: int):
        self.inner = inner
        self.provider, self.model = inner.provider, inner.model
        self.state, self.kill_point, self.n, self.call = state, kill_point, n, call
        self.calls = 0

    def _armed(self, point: str) -> bool:
        return (
            self.kill_point == point
            and self.state["message_no"] == self.n
            and self.state["calls_this_message"] == self.call
        )

    def complete(self, request):
        self.calls += 1
        self.state["calls_this_message"] += 1
        if self._armed("before_llm"):
            die(f"before_llm message={self.n} call={self.call} bus_id={self.state['bus_id']}")
        response = self.inner.complete(request)
        if self._armed("after_llm"):
            die(f"after_llm message={self.n} call={self.call} bus_id={self.state['bus_id']}")
        return response


def install(kill_point: str, n: int, state: dict) -> None:
    """Monkeypatch the commit and export paths for the chosen kill point."""
    from cortex_pipelines.brain import loop
    from cortex_pipelines.storage import bus
    from cortex_pipelines.storage import outbox as outbox_store

    original_process = loop.Brain._process
    original_commit = loop.Brain._commit

    def process(self, msg, report):
        state["message_no"] += 1
        state["calls_this_message"] = 0
        state["bus_id"] = msg.id
        result = original_process(self, msg, report)
        if kill_point == "after_commit" and state["message_no"] == n:
            die(f"after_commit message={n} bus_id={msg.id}")
        return result

    def commit(self, con, msg, *args, **kwargs):
        if kill_point == "before_commit" and state["message_no"] == n:
            die(f"before_commit message={n} bus_id={msg.id}")
        return original_commit(self, con, msg, *args, **kwargs)

    loop.Brain._process = process
    loop.Brain._commit = commit

    if kill_point == "mid_commit":
        original_mark = bus.mark_completed

        def mark_completed(con, bus_id):
            original_mark(con, bus_id)
            if state["message_no"] == n:
                die(f"mid_commit message={n} bus_id={bus_id} (transaction still open)")

        bus.mark_completed = mark_completed  # loop calls it as bus.mark_completed

    if kill_point == "between_outbox_and_export":

        def export_files(db, paths):
            die(f"between_outbox_and_export after {state['message_no']} message(s)")

        loop.outbox.export_files = export_files

    if kill_point == "mid_export":
        original_write = outbox_store.write_atomic

        def write_atomic(path, content):
            original_write(path, content)
            die(f"mid_export after writing {Path(path).name}")

        outbox_store.write_atomic = write_atomic


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (3, 4) or args[1] not in KILL_POINTS:
        sys.exit(f"usage: crash_worker.py HOME {{{'|'.join(KILL_POINTS)}}} N [CALL]")
    home, kill_point, n = args[0], args[1], int(args[2])
    call = int(args[3]) if len(args) == 4 else 1

    from cortex_pipelines.brain.loop import Brain
    from cortex_pipelines.config import load_settings
    from cortex_pipelines.llm.offline import OfflineClient
    from cortex_pipelines.storage import Database

    settings = load_settings(home)
    db = Database(settings.paths.db)
    state = {"message_no": 0, "calls_this_message": 0, "bus_id": None}
    install(kill_point, n, state)
    client = CountingClient(OfflineClient(), state, kill_point, n, call)
    max_messages = n if kill_point in EXPORT_POINTS else None
    report = Brain(db, settings, client).drain(max_messages=max_messages)
    print(
        f"crash_worker: kill point {kill_point} not reached; processed={report.processed} "
        f"llm_calls={client.calls}",
        file=sys.stderr,
    )
    sys.exit(3)


if __name__ == "__main__":
    main()
