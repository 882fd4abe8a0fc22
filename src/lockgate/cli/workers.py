"""`lockgate proxy --workers N`: the proxy served by N processes under gunicorn, a real
process manager (`pip install 'lockgate[server]'`).

The settings are read, and every secret with them, in this process before any worker
starts; the variables that held secrets are already forgotten. gunicorn's master binds the
address and starts N workers with aiohttp's worker class (its uvloop worker where uvloop
is installed: `proxy/loop_policy.py`), each running the proxy's own
runner (its head timeout, its answer to a request it cannot parse). Each worker prints its
requests' lines on the shared stdout, whole lines. The metrics are every worker's: their
series go to files in a folder of their own (`PROMETHEUS_MULTIPROC_DIR`, made here unless
given, removed at the end), and `/metrics` in any worker reads them all; a worker that
exits is marked dead so that its gauges stop counting. SIGTERM or SIGINT: the master stops
accepting and tells each worker to stop; each drains as `lockgate proxy` does (requests in
flight may end within the grace period, then are cut), then the master exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING, Any

from ..proxy.loop_policy import gunicorn_worker_class, loop_name
from .codes import EXIT_OK, UsageError
from .output import listening_output, record_output
from .process import SECRETS

if TYPE_CHECKING:
    from ..proxy.config import ProxySettings

__all__ = ["serve_workers"]


def _address(host: str, port: int) -> str:
    """`HOST:PORT`, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def serve_workers(args: argparse.Namespace, settings: ProxySettings) -> int:
    """Serve `settings` (its secrets read) from `args.workers` processes."""
    try:
        from gunicorn.app.base import BaseApplication  # type: ignore[import-untyped]
    except ImportError:
        raise UsageError("--workers needs gunicorn: pip install 'lockgate[server]'") from None
    from ..credentials import Redactor
    from ..display import visible
    from ..proxy.metrics import MULTIPROCESS_VARIABLE, multiprocess_folder_problem
    from ..proxy.server import ProxyRecord, ProxyServer

    if "prometheus_client" in sys.modules and settings.metrics:  # pragma: no cover
        raise UsageError("--workers: the metrics library was loaded too early")
    made: str | None = None
    given = os.environ.get(MULTIPROCESS_VARIABLE)
    if settings.metrics and given:  # checked here, before a worker trips over it
        problem = multiprocess_folder_problem(given)
        if problem is not None:
            raise UsageError(problem)
    if settings.metrics and not os.environ.get(MULTIPROCESS_VARIABLE):
        made = tempfile.mkdtemp(prefix="lockgate-metrics-")
        os.environ[MULTIPROCESS_VARIABLE] = made
    redact = Redactor(SECRETS)
    workers: int = args.workers

    def emit(line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def log(record: ProxyRecord) -> None:
        emit(record_output(record, args.json, redact))

    def warn(line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            print(visible(redact(line), multiline=False), file=sys.stderr, flush=True)

    async def runner() -> Any:
        return ProxyServer(settings, log, warn).runner()

    def when_ready(server: Any) -> None:
        host, port = server.LISTENERS[0].sock.getsockname()[:2]
        url = "http://" + _address(str(host), port)
        emit(listening_output(url, settings, args.json, workers, loop_name()))

    def child_exit(server: Any, worker: Any) -> None:
        if made is not None or os.environ.get(MULTIPROCESS_VARIABLE):
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]

    options: dict[str, Any] = {
        "bind": _address(settings.host, settings.port),
        "workers": workers,
        "worker_class": gunicorn_worker_class(),  # uvloop's where it is installed
        # gunicorn kills a worker that has not drained by then: beyond the proxy's grace.
        "graceful_timeout": math.ceil(settings.grace_seconds) + 5,
        "timeout": 0,  # a long stream is no hung worker: the proxy bounds its own time
        "accesslog": None,
        "errorlog": "-",
        "loglevel": "warning",
        "proc_name": "lockgate-proxy",
        "when_ready": when_ready,
        "child_exit": child_exit,
    }

    class Application(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            known = self.cfg.settings
            for name, value in options.items():
                self.cfg.set(name, value)
            if "control_socket_disable" in known:
                self.cfg.set("control_socket_disable", True)

        def load(self) -> Any:
            return runner

    master = os.getpid()
    code = EXIT_OK
    try:
        Application().run()
    except SystemExit as exit_:
        if os.getpid() != master:
            raise  # a worker leaving: its own exit, nothing of the master's to do
        code = exit_.code if isinstance(exit_.code, int) else EXIT_OK
    finally:
        if made is not None and os.getpid() == master:
            shutil.rmtree(made, ignore_errors=True)
    if code == EXIT_OK:
        print(f"lockgate proxy: stopped ({workers} workers)", file=sys.stderr)
    return code
