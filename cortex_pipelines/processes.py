"""Child processes: is the process that claimed something still the same live process, and the
long-running children of `cortex serve` and `cortex dev` (stopped gently, restarted when they die).

A SIGKILLed run leaves its pid behind in a lease row or a Dagster event. `os.kill(pid, 0)` is not
enough to tell it is gone: a killed child that its parent has not reaped is a zombie that still
answers, and after a while the pid can belong to a new, unrelated process.
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path

import psutil

# Process start times and the time a claim was recorded come from different clocks (the kernel's
# boot-relative ticks, the claimant's wall clock); allow this much disagreement.
_CLOCK_SLACK_S = 2.0


_polars: types.ModuleType | None = None
_polars_lock = threading.Lock()

# A command imports Dagster, LanceDB and DuckDB's Python side: some 300,000 objects that live as long
# as the process. With Python's default thresholds the collector scanned all of them on every tenth
# collection of the younger generations, 0.5-0.6 of the ~5.5 CPU-s of a one-message `cortex run`;
# scanning them a hundred times less often leaves 0.2. Young objects are collected as often as before.
_FULL_COLLECTION_EVERY = 1000


def collect_old_objects_rarely() -> None:
    """Make full garbage collections rare in every `cortex` command (see _FULL_COLLECTION_EVERY); a
    long-running one (`cortex dev`, `chat`, `serve`) still makes them, a hundred times further apart."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, _FULL_COLLECTION_EVERY)


def polars_keeping_sigint() -> types.ModuleType:
    """polars, its runtime started, with SIGINT given back to Python. On its first query the runtime
    installs, below Python, a SIGINT handler that restarts what was interrupted and never raises
    KeyboardInterrupt: once a message had been answered, Ctrl-C on `cortex run` or `cortex chat`,
    and Dagster's termination of a run (SIGINT to its process), did nothing. Later queries leave
    the handler as it is. Python's handler is armed again on every call from the main thread (only
    the main thread may), so a process whose threads query polars calls this first, on the main
    thread. A SIGINT ignored since the process started (a script's background job) is armed too:
    Dagster terminates a run, and `cortex dev` stops its children, by SIGINT."""
    global _polars
    with _polars_lock:
        if _polars is None:
            import polars as pl

            pl.select(pl.lit(1)).item()
            _polars = pl
    if threading.current_thread() is threading.main_thread():
        handler = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, handler if callable(handler) else signal.default_int_handler)
    return _polars


_helpers: dict[str, ThreadPoolExecutor] = {}
_helpers_lock = threading.Lock()


def helper_thread(name: str) -> ThreadPoolExecutor:
    """This process's one-thread executor of that name, for work that runs beside the calling
    thread (recall embeds its query on one while it searches by keywords). A forked child makes its
    own: the copy it inherits has no thread, and would take work and never run it."""
    with _helpers_lock:
        if name not in _helpers:
            _helpers[name] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        return _helpers[name]


def _forget_helpers_in_child() -> None:
    global _helpers_lock
    _helpers_lock = threading.Lock()  # another thread may have held it at the fork
    _helpers.clear()


os.register_at_fork(after_in_child=_forget_helpers_in_child)


def alive(pid: int, claimed_at: float | None = None) -> bool:
    """Whether `pid` runs and is not a zombie; with `claimed_at` (a Unix time), also whether it
    started no later than the claim, so a reused pid reads as dead."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return claimed_at is None or process.create_time() <= claimed_at + _CLOCK_SLACK_S
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def stop(proc: subprocess.Popen, grace_s: float) -> int:
    """SIGTERM, then SIGKILL if it has not exited within `grace_s`. Returns its exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def group_alive(pgid: int) -> bool:
    """Whether a process of process group `pgid` still runs; zombies, which only wait to be reaped,
    do not count."""
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue  # gone meanwhile
    return False


def group_ended(pgid: int, timeout_s: float) -> bool:
    """Whether every process of group `pgid` has ended within `timeout_s`. They need not be our
    children (a grandchild whose parent has gone), so this polls."""
    deadline = time.monotonic() + timeout_s
    while group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


PR_SET_PDEATHSIG = 1  # linux/prctl.h
# Looked up here, not in the child: a forked child of a threaded process must not load libraries.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def own_session_ending_with_parent() -> None:
    """Popen's preexec_fn for a long-running child: a session of its own, so the terminal's Ctrl-C
    is its parent's alone (which stops its children in order), and on Linux SIGTERM when the parent
    dies, even by SIGKILL, which no longer reaches a child in another session through its group."""
    os.setsid()
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


# Set by `cortex dev` in the environment of the `dagster dev` it starts (its pid): every process
# under it (webserver, daemon, code server, runs) inherits it. Not CORTEX_*: no setting.
DEV_MARK = "STARTED_BY_CORTEX_DEV"


def left_by_earlier_dev(dagster_home: Path, dev_pid: int | None = None) -> list[tuple[psutil.Process, str]]:
    """The processes an earlier `cortex dev` on this DAGSTER_HOME (any, or the one of `dev_pid`)
    started and left running, each with its program ("dagster_webserver"). Asked with the home's
    claim held, or once that `cortex dev` has ended, so each is a leftover: `dagster dev` tells its
    webserver and daemon to stop on a pipe, and they run on when the pipe closes instead; one
    SIGTERMed as its `cortex dev` was SIGKILLed, at a moment it could only print "Aborted!", left
    both running, the webserver on the UI's port and a second daemon on the instance. A `dagster
    dev` someone runs by hand carries no mark and is never taken for one."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            environ = process.environ()
        except (OSError, psutil.Error):
            continue  # gone meanwhile, or not ours to read
        marked = DEV_MARK in environ if dev_pid is None else environ.get(DEV_MARK) == str(dev_pid)
        if marked and environ.get("DAGSTER_HOME") == str(dagster_home):
            found.append((process, _program(process.info["cmdline"] or [])))
    return found


def _program(args: list[str]) -> str:
    """A Python process by its module (`-m dagster_webserver`), anything else by its executable."""
    if "-m" in args[:-1]:
        return args[args.index("-m") + 1]
    return Path(args[0]).name if args else "?"


# The watcher's program: it waits for the end of its stdin, which comes when the `cortex dev`
# holding the pipe's other end has ended, however (the kernel closes a killed process's files).
_WATCHER = (
    "import sys\n"
    "from pathlib import Path\n"
    "from cortex_pipelines.processes import end_leftovers\n"
    "sys.stdin.buffer.read()\n"
    "end_leftovers(Path(sys.argv[2]), int(sys.argv[1]))\n"
)


def watch_for_my_end(dagster_home: Path) -> subprocess.Popen:
    """A process that ends what this `cortex dev` started (marked with its pid) once it has ended,
    even by SIGKILL, which nothing in this process can answer: its `dagster dev`, SIGTERMed then,
    may leave its webserver and daemon running (see `left_by_earlier_dev`), serving a home nobody
    is watching until the next `cortex dev` there. In a session of its own (Ctrl-C is not its),
    unmarked; holds the pipe's read end only, as `close_fds` keeps the write end from others."""
    env = {name: value for name, value in os.environ.items() if name != DEV_MARK}
    return subprocess.Popen(
        [sys.executable, "-c", _WATCHER, str(os.getpid()), str(dagster_home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )


def end_leftovers(dagster_home: Path, dev_pid: int) -> None:
    """End what the `cortex dev` of `dev_pid` started on this home and left running."""
    end_processes([process for process, _ in left_by_earlier_dev(dagster_home, dev_pid)], grace_s=10.0)


def end_processes(processes: list[psutil.Process], grace_s: float) -> None:
    """SIGTERM, then SIGKILL for those still running after `grace_s`."""
    for process in processes:
        with suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        with suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=grace_s)


BAD_INPUT = 2  # a `cortex` command's exit status for bad input or configuration


class Supervised:
    """A child process kept running, restarted with growing pauses when it exits, until stopped (a
    connector whose network dropped must not take the gateway down, nor stay down). It runs in its
    own session: the terminal's Ctrl-C is its parent's alone, which then stops it in order (told at
    once, the gateway under `cortex dev` drained, exited and was restarted while `cortex dev` stopped)."""

    def __init__(
        self,
        name: str,
        cmd: list[str],
        env: dict[str, str],
        say: Callable[[str], None],
        on_state: Callable[[str], None] = lambda _state: None,
    ):
        self.name, self.cmd, self.env, self.say = name, cmd, env, say
        # "running", "restarting: …" or "stopped: …", told to `on_state` as it changes (a connector
        # refused for good had left /health saying "ok" and `cortex status` saying nothing)
        self.state = "starting"
        self.on_state = on_state
        self.proc: subprocess.Popen | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._keep, name=f"supervise-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _keep(self) -> None:
        pause = 1.0
        while True:
            with self._lock:
                if self._stopping.is_set():
                    return
                self.proc = subprocess.Popen(
                    self.cmd, env=self.env, preexec_fn=own_session_ending_with_parent
                )
                started = time.monotonic()
            self._set_state("running")
            code = self.proc.wait()
            if self._stopping.is_set():
                return
            if code == BAD_INPUT:
                self.say(f"{self.name} exited with status {code} (bad configuration); not restarting")
                self._set_state(f"stopped: exited with status {code} (bad configuration), see its log")
                return
            pause = 1.0 if time.monotonic() - started > 60 else min(pause * 2, 60.0)
            self.say(f"{self.name} exited with status {code}; restarting in {pause:.0f} s")
            self._set_state(f"restarting: exited with status {code}")
            if self._stopping.wait(pause):
                return

    def _set_state(self, state: str) -> None:
        self.state = state
        self.on_state(state)

    def wind_down(self) -> None:
        """Restart nothing from now on, and say nothing of a child that exits: its parent is stopping,
        and a signal sent to every process at once (systemd stopping the service) may reach it first."""
        self._stopping.set()

    def stop(self, grace_s: float) -> None:
        with self._lock:
            self._stopping.set()
            proc = self.proc
        if proc is not None:
            stop(proc, grace_s)
        self._thread.join(grace_s)
