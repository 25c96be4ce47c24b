"""Running the gateway: uvicorn on 127.0.0.1 and every configured connector as a child process.

SIGTERM or Ctrl-C drains: the connectors are stopped first, each finishing and acknowledging the
reply it is sending through this still-running server; then the server stops taking connections
and finishes the requests in flight. A second Ctrl-C stops at once.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import sys
import threading
from functools import partial

import uvicorn

from cortex_pipelines.config import Settings
from cortex_pipelines.connectors.states import record_state
from cortex_pipelines.gateway.app import create_app
from cortex_pipelines.processes import Supervised

HOST = "127.0.0.1"
CONNECTOR_GRACE_S = 30.0  # a connector sending a long reply in parts
REQUEST_GRACE_S = 10.0
_CONNECT = [sys.executable, "-m", "cortex_pipelines.cli", "connect"]


_PORT_PROBLEMS = {
    errno.EADDRINUSE: "is already in use (another gateway?)",
    errno.EACCES: "needs privileges this user lacks",
}
_CHOOSE_ANOTHER_PORT = "pass --port (cortex dev: --gateway-port) or set CORTEX_GATEWAY_PORT"


class PortUnavailable(Exception):
    """The gateway's port cannot be listened on; the message is one line for the user."""


def listen(port: int) -> socket.socket:
    """A socket listening on HOST:`port`, made before the banner names that URL: a port another
    program holds fails here, once, instead of in uvicorn after the banner (and, under `cortex dev`,
    again at every restart)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a restart within TIME_WAIT binds
    try:
        sock.bind((HOST, port))
        sock.listen()  # connections queue from the banner on; uvicorn sets its own backlog
    except OSError as exc:
        sock.close()
        why = _PORT_PROBLEMS.get(exc.errno)
        if why is None:
            raise
        raise PortUnavailable(f"port {port} on {HOST} {why}; {_CHOOSE_ANOTHER_PORT}") from None
    return sock


def configured_connectors(settings: Settings) -> list[str]:
    """The connectors whose credentials are configured."""
    return ["telegram"] if settings.telegram_token is not None else []


class _QuietPolls(logging.Filter):
    """Leave connectors' idle polling (one request a second each) out of the access log."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (len(args) == 5 and args[2] in ("/outbox/poll", "/health") and args[4] == 200)


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, connectors: list[Supervised]):
        super().__init__(config)
        self.connectors = connectors
        self._draining = False

    def handle_exit(self, sig, frame) -> None:
        """First signal: drain in a thread, so the loop keeps serving the connectors' last acks. A
        second Ctrl-C stops at once; a SIGTERM while draining (`cortex dev` stopping its gateway
        after systemd signalled every process of the service) changes nothing."""
        if self._draining:
            if sig == signal.SIGINT:
                self.should_exit = self.force_exit = True
            return
        self._draining = True
        threading.Thread(target=self._drain, name="drain", daemon=True).start()

    def _drain(self) -> None:
        for connector in self.connectors:
            connector.stop(CONNECTOR_GRACE_S)
        self.should_exit = True


def serve(settings: Settings, port: int, say) -> None:
    """Serve until SIGTERM or Ctrl-C; `settings.ingest_api_key` must be set. Raises PortUnavailable
    before saying anything when the port cannot be listened on."""
    sock = listen(port)
    connectors = {
        name: Supervised(
            f"connector {name}",
            [*_CONNECT, name, "--port", str(port), "--parent-pid", str(os.getpid())],
            {**os.environ, "CORTEX_HOME": str(settings.home)},
            say,
            on_state=partial(record_state, settings.paths, name),
        )
        for name in configured_connectors(settings)
    }
    config = uvicorn.Config(
        create_app(settings, lambda: {name: c.state for name, c in connectors.items()}),
        host=HOST,
        port=port,
        log_level="info",
        timeout_graceful_shutdown=int(REQUEST_GRACE_S),
        server_header=False,
    )
    server = _Server(config, list(connectors.values()))
    logging.getLogger("uvicorn.access").addFilter(_QuietPolls())
    say(f"Cortex gateway: http://{HOST}:{port}  (API docs at /docs)")
    for connector in connectors.values():
        say(f"starting {connector.name}")
        connector.start()
    try:
        server.run(sockets=[sock])
    finally:
        for connector in connectors.values():
            connector.stop(CONNECTOR_GRACE_S)
