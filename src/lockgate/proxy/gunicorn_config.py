"""gunicorn's settings and hooks for the proxy's app factory, for your own gunicorn:

    gunicorn -c python:lockgate.proxy.gunicorn_config 'lockgate.proxy.server:app_factory' \
      --workers 4 --bind 0.0.0.0:8787 --graceful-timeout 15

- `on_starting` runs in the master before it binds or starts a worker: a setting the proxy
  cannot use (`environment.startup_settings`: the config file or the variables, a metrics
  folder that is not there) is one line on stderr (`lockgate proxy: REASON`) and exit 4,
  once, never a worker's traceback. With a metrics folder, the live gauges of processes
  that died unmarked (a SIGKILL before this start) are forgotten.
- `child_exit` marks a worker that exited dead in the metrics folder, so that the gauges
  (`lockgate_proxy_in_flight`, `lockgate_proxy_held_bytes`) stop counting it.
- `worker_class` is aiohttp's worker, its uvloop worker where uvloop is installed
  (`loop_policy.py`; `--worker-class` on the command line overrides it).

Only the master reads the settings here; each worker reads them again in `app_factory`
(the master keeps the environment as it was: its workers inherit it).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .loop_policy import gunicorn_worker_class

__all__ = ["APP_LOAD_ERROR", "child_exit", "on_starting", "worker_class"]

APP_LOAD_ERROR = 4  # gunicorn's exit code for an application that cannot load
worker_class = gunicorn_worker_class()  # uvloop's worker where uvloop is installed


def on_starting(server: Any) -> None:
    """gunicorn's hook in the master, before it binds or forks: the settings checked."""
    from .environment import startup_settings
    from .metrics import MULTIPROCESS_VARIABLE, forget_dead_processes

    try:
        settings, _ = startup_settings(os.environ)
    except ValueError as exc:
        print(f"lockgate proxy: {exc}", file=sys.stderr, flush=True)
        pidfile = getattr(server, "pidfile", None)
        if pidfile is not None:
            pidfile.unlink()
        raise SystemExit(APP_LOAD_ERROR) from None
    folder = os.environ.get(MULTIPROCESS_VARIABLE)
    if settings.metrics and folder:
        forget_dead_processes(folder)


def child_exit(server: Any, worker: Any) -> None:
    """gunicorn's hook in the master when a worker exited: its gauges stop counting."""
    from .metrics import MULTIPROCESS_VARIABLE

    folder = os.environ.get(MULTIPROCESS_VARIABLE)
    if folder and os.path.isdir(folder):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid, folder)  # type: ignore[no-untyped-call]
