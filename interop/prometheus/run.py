"""A real Prometheus over `lockgate proxy --workers 2` (issue 28): every dashboard query and
every alert rule answered from the series it scraped.

    python -m interop.prometheus.run [--workers 2] [--rounds 4] [--timeout 120]

Starts, all on loopback and in a temporary folder: a scripted Chat Completions upstream
(the lab's `ServerThread`; each request's `model` says what it answers), `lockgate proxy
--config FILE --workers N --json` under gunicorn (its metrics folder given, so the workers
that counted can be read from it), and Debian's `prometheus` (on PATH) scraping the proxy's
`/metrics` every second, with `deploy/prometheus/lockgate.rules.yml` loaded. The routes:
`pass` (answers whose calls are valid), `withhold` (a second call naming no declared tool),
`refuse` (text, then the stream ends without its terminal: refused, incomplete), `flaky`
(a 500, then the answer: retried unseen on its fall-back), `broken` (a 500 every time: its
2 retries exhausted), `unusable` (a declared tool whose schema the gate cannot use).

A burst of each in two waves a few scrapes apart (a series is born at its first count:
`rate()` sees the second wave's), every request on a connection of its own so that
gunicorn spreads them over the workers; then it checks that every worker counted requests
(their counter files in the metrics folder), waits for the scrapes, and asks Prometheus
(`/api/v1/query`) every panel query of `deploy/grafana/lockgate-dashboard.json` (`$route`
as every route, `$__rate_interval` as 1m) and every alert's expression with its
thresholds lowered
(`tests.ops.deploy.lowered`), and `/api/v1/rules` whether each rule is loaded and healthy.

Prints Prometheus' version, then a table: query, series returned (a query whose every
series is NaN, a ratio of rates that saw no increase, fails as `NaN ONLY`). Readiness and the
held-bytes budget are what the server states (`ProxyMetrics.set_ready`,
`set_held_limit`); if it states neither (0 where 1 and the budget were due), the queries
that need them say UNWIRED, a failure. Exit 0 when every query
returned series and every rule is healthy, 1 otherwise, 2 when `prometheus` is missing or
a process did not start (one line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from tests.ops.deploy import RULES, Query, alert_rules, concrete, dashboard_queries, lowered
from tests.proxy.support import request_for

from lockgate.lab.recorded import RecordedRequest
from lockgate.lab.server import ServerThread
from lockgate.scripted.reply import Call, OpeningError, Reply, Say
from lockgate.scripted.script import Turn

__all__ = ["main"]

READ = {"path": "src/app.py"}
EDIT = {"path": "src/app.py", "old": "a - b", "new": "a + b"}
ROUTES = ("pass", "withhold", "refuse", "flaky", "broken", "unusable")
WIRED = ("lockgate_proxy_ready", "lockgate_proxy_held_bytes_limit")
MAX_HELD_BYTES = 268435456  # the proxy's default budget per worker


def _reply(*calls: Call, ending: str = "complete") -> Turn:
    parts: tuple[Any, ...] = (Say("Fixing it."), *calls)
    return Turn(reply=Reply("r1", parts, ending=ending))  # type: ignore[arg-type]


ACCEPTED = _reply(Call("call_1", "read", READ), Call("call_2", "edit", EDIT))
INVALID = _reply(Call("call_1", "read", READ), Call("call_2", "rm_rf", {"x": 1}))
CUT = Turn(reply=Reply("r1", (Say("The bug is in add.", 4),), ending="open"))
FAILING = Turn(error=OpeningError(500, "server", "the upstream broke"))


class Upstream:
    """What the scripted upstream answers, by the request's model (`KIND-N`): a `flaky`
    one fails its first attempt only."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def select(self, request: RecordedRequest) -> Turn | None:
        model = str(request.body.get("model", "")) if isinstance(request.body, dict) else ""
        kind = model.split("-", 1)[0]
        if kind in ("pass", "unusable"):
            return ACCEPTED
        if kind == "withhold":
            return INVALID
        if kind == "refuse":
            return CUT
        if kind == "broken":
            return FAILING
        if kind == "flaky":
            with self._lock:
                first = model not in self._seen
                self._seen.add(model)
            return FAILING if first else ACCEPTED
        return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def proxy_config(port: int, upstream: str) -> str:
    retried = "    retries: {attempts: 2, max_wait: 5}\n"
    routes = "".join(
        f"  - name: {name}\n    prefix: /{name}\n    upstream: {upstream}\n"
        + (retried if name in ("flaky", "broken") else "")
        + (f"    fallbacks:\n      - {{upstream: {upstream}}}\n" if name == "flaky" else "")
        for name in ROUTES
    )
    return f"listen: {{host: 127.0.0.1, port: {port}}}\nroutes:\n{routes}"


def prometheus_config(proxy_port: int) -> str:
    return (
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {RULES}\n"
        "scrape_configs:\n"
        "  - job_name: lockgate\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{proxy_port}']\n"
    )


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            status: int = answer.status
            return status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return 0, b""


def _wait_for(url: str, process: subprocess.Popen[bytes], limit: float, name: str) -> None:
    until = time.monotonic() + limit
    while time.monotonic() < until:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited ({process.returncode}) before it answered {url}")
        if _get(url, 2.0)[0] == 200:
            return
        time.sleep(0.2)
    raise RuntimeError(f"{name} did not answer {url} within {limit:g} s")


def _body(kind: str, number: int) -> Any:
    body = request_for("chat")
    body["model"] = f"{kind}-{number}"
    if kind == "unusable":
        odd = {"type": "object", "properties": {"x": {"type": 5}}}  # no valid JSON Schema
        body["tools"] = [
            *body["tools"],
            {"type": "function", "function": {"name": "odd", "parameters": odd}},
        ]
    return body


async def burst(base: str, rounds: int, first: int = 0) -> dict[str, list[int]]:
    """`rounds` requests of every kind (numbered from `first`), 8 at a time, each on a
    connection of its own; the statuses per kind."""
    statuses: dict[str, list[int]] = {kind: [] for kind in ROUTES}
    limit = asyncio.Semaphore(8)

    async def one(kind: str, number: int) -> None:
        async with limit:
            connector = aiohttp.TCPConnector(force_close=True)
            async with (
                aiohttp.ClientSession(connector=connector) as session,
                session.post(
                    f"{base}/{kind}/v1/chat/completions", json=_body(kind, number)
                ) as answer,
            ):
                await answer.read()
                statuses[kind].append(answer.status)

    await asyncio.gather(
        *(one(kind, number) for number in range(first, first + rounds) for kind in ROUTES)
    )
    return statuses


def counting_workers(folder: Path) -> set[int]:
    """The processes whose counters are in the metrics folder (`counter_PID.db`): those
    that counted a request."""
    return {
        int(name.removeprefix("counter_").removesuffix(".db"))
        for name in os.listdir(folder)
        if name.startswith("counter_") and name.endswith(".db")
    }


def query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    status, body = _get(url, 10.0)
    answer = json.loads(body) if body else {}
    if status != 200 or answer.get("status") != "success":
        raise RuntimeError(f"Prometheus refused {expr!r}: {answer.get('error', status)}")
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def rules_health(prometheus: str) -> dict[str, str]:
    status, body = _get(f"{prometheus}/api/v1/rules", 10.0)
    if status != 200:
        return {}
    groups = json.loads(body)["data"]["groups"]
    return {rule["name"]: rule["health"] for group in groups for rule in group["rules"]}


@dataclass(slots=True)
class Row:
    where: str
    expr: str
    series: int
    status: str  # ok, NO SERIES, NaN ONLY (no value to read), UNWIRED


def _value(prometheus: str, expr: str) -> float | None:
    found = query(prometheus, expr)
    return float(found[0]["value"][1]) if found else None


def run(args: argparse.Namespace, prometheus_bin: str) -> int:
    version = subprocess.run(
        [prometheus_bin, "--version"], capture_output=True, text=True, check=False
    )
    print(version.stdout.splitlines()[0] if version.stdout else "prometheus: version unknown")
    with tempfile.TemporaryDirectory(prefix="lockgate-prometheus-") as temporary:
        folder = Path(temporary)
        metrics = folder / "metrics"
        metrics.mkdir()
        proxy_port, prometheus_port = _free_port(), _free_port()
        upstream = Upstream()
        with ServerThread([], provider="chat", select=upstream.select) as lab:
            config = folder / "proxy.yaml"
            assert lab.server is not None
            origin = f"http://127.0.0.1:{lab.server.port}"
            config.write_text(proxy_config(proxy_port, origin), encoding="utf-8")
            env = {
                key: value
                for key, value in os.environ.items()
                if not key.startswith(("LOCKGATE_", "PROMETHEUS_MULTIPROC"))
            }
            env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics)
            proxy_log = (folder / "proxy.log").open("wb")
            command = [sys.executable, "-m", "lockgate", "proxy", "--config", str(config)]
            command += ["--workers", str(args.workers), "--json"]
            proxy = subprocess.Popen(command, env=env, stdout=proxy_log, stderr=proxy_log)
            (folder / "prometheus.yml").write_text(prometheus_config(proxy_port), "utf-8")
            prometheus_log = (folder / "prometheus.log").open("wb")
            prometheus = subprocess.Popen(
                [
                    prometheus_bin,
                    f"--config.file={folder / 'prometheus.yml'}",
                    f"--storage.tsdb.path={folder / 'data'}",
                    f"--web.listen-address=127.0.0.1:{prometheus_port}",
                    "--log.level=warn",
                ],
                stdout=prometheus_log,
                stderr=prometheus_log,
            )
            try:
                base = f"http://127.0.0.1:{proxy_port}"
                api = f"http://127.0.0.1:{prometheus_port}"
                try:
                    _wait_for(f"{base}/readyz", proxy, 60, "lockgate proxy")
                    _wait_for(f"{api}/-/ready", prometheus, 60, "prometheus")
                except RuntimeError as exc:
                    print(f"error: {exc}", file=sys.stderr)
                    for log in ("proxy.log", "prometheus.log"):
                        text = (folder / log).read_text("utf-8", "replace")
                        print(f"--- {log}\n{text[-3000:]}", file=sys.stderr)
                    return 2
                # Two waves, scrapes between: a series is born at its first count, so
                # rate() sees only what comes after a scrape of it (the second wave).
                statuses: dict[str, list[int]] = {kind: [] for kind in ROUTES}
                for wave in (args.rounds // 2, args.rounds - args.rounds // 2):
                    time.sleep(3)
                    for kind, seen in asyncio.run(burst(base, wave, len(statuses["pass"]))).items():
                        statuses[kind] += seen
                for kind in ROUTES:
                    print(f"burst {kind}: HTTP {sorted(set(statuses[kind]))} x{args.rounds}")
                return _check(args, api, metrics, statuses)
            finally:
                for process in (prometheus, proxy):
                    process.terminate()
                for process in (prometheus, proxy):
                    try:
                        process.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait()
                proxy_log.close()
                prometheus_log.close()


def _check(
    args: argparse.Namespace, api: str, metrics: Path, statuses: dict[str, list[int]]
) -> int:
    failures: list[str] = []
    expected = {"pass": 200, "withhold": 200, "refuse": 200, "flaky": 200, "broken": 500}
    for kind, due in expected.items():
        if set(statuses[kind]) != {due}:
            failures.append(f"route {kind} answered {statuses[kind]}, not all {due}")
    workers = counting_workers(metrics)
    print(f"workers that counted requests: {len(workers)} (pids {sorted(workers)})")
    if len(workers) < args.workers:
        failures.append(f"only {len(workers)} of {args.workers} workers served requests")

    # The burst's last counts scraped, and every rule evaluated.
    until = time.monotonic() + args.timeout
    total = len(ROUTES) * args.rounds
    health: dict[str, str] = {}
    while time.monotonic() < until:
        counted = _value(api, "sum(lockgate_proxy_requests_total)") or 0.0
        health = rules_health(api)
        if counted >= total and health and all(h == "ok" for h in health.values()):
            break
        time.sleep(1)
    time.sleep(3)  # a few more scrapes: every rate has its samples

    ready = _value(api, "max(lockgate_proxy_ready)")
    limit = _value(api, "sum(lockgate_proxy_held_bytes_limit)")
    unwired: set[str] = set()
    if ready != 1.0:
        unwired.add("lockgate_proxy_ready")
    if limit != float(MAX_HELD_BYTES * args.workers):
        unwired.add("lockgate_proxy_held_bytes_limit")
    print(f"lockgate_proxy_ready (max over workers): {ready} (1 due)")
    print(
        f"lockgate_proxy_held_bytes_limit (sum over workers): {limit} "
        f"({MAX_HELD_BYTES * args.workers} due)"
    )

    queries: list[Query] = [
        *(Query(f"dashboard: {q.where}", concrete(q.expr)) for q in dashboard_queries()),
        *(Query(f"rule: {rule['alert']}", lowered(rule["expr"])) for rule in alert_rules()),
    ]
    rows: list[Row] = []
    for item in queries:
        result = query(api, item.expr)
        finite = [one for one in result if math.isfinite(float(one["value"][1]))]
        needs = [name for name in unwired if name in item.expr]
        status = "ok"
        if needs:
            status = "UNWIRED"
        elif not result:
            status = "NO SERIES"
        elif not finite:
            status = "NaN ONLY"
        rows.append(Row(item.where, " ".join(item.expr.split()), len(result), status))
    width = max(len(row.where) for row in rows)
    print()
    print(f"{'query':<{width}}  series  status")
    for row in rows:
        print(f"{row.where:<{width}}  {row.series:>6}  {row.status}")
    print()
    print("rules loaded (/api/v1/rules):")
    for rule in alert_rules():
        print(f"  {rule['alert']}: {health.get(rule['alert'], 'MISSING')}")
        if health.get(rule["alert"]) != "ok":
            failures.append(f"rule {rule['alert']} is {health.get(rule['alert'], 'not loaded')}")
    failures += [
        f"{row.where}: {row.status.lower()} ({row.expr})"
        for row in rows
        if row.status in ("NO SERIES", "NaN ONLY")
    ]
    if unwired:
        line = (
            f"unwired: {', '.join(sorted(unwired))} (the server did not state them: "
            "ProxyMetrics.set_ready / set_held_limit)"
        )
        failures.append(line)
    if failures:
        print()
        for failure in failures:
            print(f"FAILED: {failure}")
        return 1
    print(f"\nall {len(rows)} queries returned series; every rule is healthy")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m interop.prometheus.run",
        description="A real Prometheus over lockgate proxy --workers N: every dashboard "
        "query and alert rule answered from its scrapes.",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4, help="requests of each kind")
    parser.add_argument("--timeout", type=float, default=120.0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    found = shutil.which("prometheus")
    if found is None:
        print("error: prometheus is not on PATH (Debian: apt-get install prometheus)")
        return 2
    if args.workers < 2:
        print("error: --workers must be at least 2 (the point is several workers' series)")
        return 2
    return run(args, found)


if __name__ == "__main__":
    sys.exit(main())
