"""Recall embeds its query and scans half its sign bits on helper threads. A process forked after
using them inherits executors whose threads did not come along; given work, they would hold it
forever and recall would hang. The child must get threads of its own."""

from __future__ import annotations

import os
import threading

import pytest

from cortex_pipelines.processes import helper_thread


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_gets_its_own_helper_thread_and_its_work_runs():
    parent = helper_thread("cortex-test-helper")
    assert parent.submit(threading.current_thread).result(timeout=5).name.startswith("cortex-test-helper")
    assert helper_thread("cortex-test-helper") is parent  # one per process and name

    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if the work ran, on a thread of its own executor
        code = 1
        try:
            child = helper_thread("cortex-test-helper")
            ran = child.submit(lambda: 6 * 7).result(timeout=5)
            code = 0 if child is not parent and ran == 42 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert parent.submit(lambda: "still here").result(timeout=5) == "still here"
