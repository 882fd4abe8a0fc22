"""`lockgate run --record DIR` and `lockgate proxy --record DIR`: every exchange a cassette
with its verdict, against loopback servers the test starts, and no secret (the key, the
client token, the client's own credentials, a `--redact-env` value) in any byte of any file;
the flags' usage errors in one line, exit 2, before anything is read or sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from lockgate.cassette.format import Verdict, load, load_all
from lockgate.cassette.recorder import SecretScrubber
from lockgate.credentials import _forms
from lockgate.lab.scenarios import repair_turns
from lockgate.lab.server import serve_script
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.proxy import GatingOptions
from lockgate.proxy.server import ProxyConfig, ProxyRecord, serving
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import Turn

from ..helpers import CLI, EDIT, serve, usage_error_line
from ..proxy.support import request_for

KEY = "sk-test-SECRET-1234"
EXTRA = "db-pass/wörd'9"  # the value of a `--redact-env` variable
HELD = "sk-held-SECRET-5678"
TOKEN = "lockgate-TOKEN-SECRET-42"
CLIENT = "sk-client-OWN-SECRET-99"


def forms(secret: str) -> set[bytes]:
    every = "".join(f"\\u{ord(c):04x}" for c in secret)
    texts = {*_forms(secret), every, json.dumps(secret)[1:-1].replace("/", "\\/")}
    return {text.encode() for text in texts}


def assert_no_secret(folder: Path, *secrets: str) -> None:
    files = list(folder.iterdir())
    assert files
    for path in files:
        raw = path.read_bytes()
        body = load(path).body if path.name.endswith(".cassette.jsonl") else b""
        for secret in secrets:
            for form in forms(secret):
                assert form not in raw, (path.name, form)
                assert form not in body, (path.name, form)


def echo_turn(*secrets: str) -> Turn:
    """Answer text that quotes each secret, in one delta (a secret cut across two deltas is
    not found: see the report's limits)."""
    text = "Quoting " + " and ".join(secrets) + "."
    return ResponseBuilder("resp_echo").created().text("msg", text, pieces=1).completed().turn()


# --- lockgate run --record --------------------------------------------------------------------


def test_run_records_every_exchange_of_the_repair_with_its_verdict(
    cli: CLI, tmp_path: Path
) -> None:
    with serve(repair_turns()) as server:
        result = cli(
            "run", "--base-url", server.base_url, "--model", "any", "--allow-execution",
            "--record", str(tmp_path), "--redact-env", "LG_EXTRA",
            key=KEY, env={"LG_EXTRA": EXTRA},
        )  # fmt: skip
    assert result.code == 0, result.err
    assert result.err.splitlines()[-1] == f"lockgate: recorded 7 cassettes in {tmp_path}"
    recorded = load_all(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert [name[:14] for name in names] == [f"{n:04d}-responses" for n in range(1, 8)]
    assert [c.verdict for c in recorded] == [Verdict("accepted", None, 1)] * 6 + [
        Verdict("accepted", None, 0)
    ]
    for cassette in recorded:
        assert (cassette.protocol, cassette.method) == ("responses", "POST")
        assert (cassette.base_url, cassette.path) == (server.base_url, "/responses")
        assert cassette.request["model"] == "any"
        assert cassette.streamed
        assert cassette.end == "clean"
        assert b"response.completed" in cassette.body
    # the history grows request by request, as sent
    assert len(recorded[-1].request["input"]) > len(recorded[0].request["input"])
    assert_no_secret(tmp_path, KEY, EXTRA)


def test_run_redacts_the_key_and_a_redact_env_value_split_across_reads(
    cli: CLI, tmp_path: Path
) -> None:
    with serve([echo_turn(KEY, EXTRA)]) as server:
        result = cli(
            "run", "--base-url", server.base_url, "--record", str(tmp_path),
            "--redact-env", "LG_EXTRA", key=KEY, env={"LG_EXTRA": EXTRA},
        )  # fmt: skip
    assert result.code == 0, result.err
    [cassette] = load_all(tmp_path)
    assert cassette.verdict == Verdict("accepted", None, 0)
    assert cassette.body.count(b"Quoting [redacted] and [redacted].") >= 2  # delta, done …
    assert_no_secret(tmp_path, KEY, EXTRA)
    assert KEY not in result.output
    assert EXTRA not in result.output


def test_run_records_a_refused_stream_with_its_kind(cli: CLI, tmp_path: Path) -> None:
    cut = ResponseBuilder("resp_cut").created().call("fc_1", "call_1", "edit", EDIT).turn()
    with serve([cut]) as server:
        result = cli(
            "run", "--base-url", server.base_url, "--allow-execution", "--record", str(tmp_path),
            key=KEY,
        )  # fmt: skip
    assert result.code == 1
    [cassette] = load_all(tmp_path)
    assert cassette.verdict == Verdict("refused", "stream_ended", 1)


@pytest.mark.parametrize("command", ["run", "proxy"])
@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--record", "{missing}"], "lockgate: --record {missing}: not an existing folder"),
        (["--redact-env", "LG_EXTRA"], "lockgate: --redact-env needs --record"),
        (
            ["--record", "{folder}", "--redact-env", "LG_UNSET"],
            "lockgate: --redact-env LG_UNSET: the variable is not set or empty",
        ),
    ],
    ids=["missing-folder", "redact-without-record", "unset-variable"],
)
def test_recording_flags_are_usage_errors_before_any_request(
    cli: CLI, tmp_path: Path, command: str, flags: list[str], line: str
) -> None:
    paths = {"missing": str(tmp_path / "missing"), "folder": str(tmp_path)}
    given = [flag.format(**paths) for flag in flags]
    with serve([]) as server:
        prefix = ["run", "--base-url", server.base_url]
        if command == "proxy":
            prefix = ["proxy", "--upstream", server.base_url.removesuffix("/v1")]
        result = cli(*prefix, *given, key=KEY, env={"LG_EXTRA": EXTRA})
        assert server.server is not None
        assert server.server.requests == []
    assert result.code == 2
    assert usage_error_line(result) == line.format(**paths)
    assert list(tmp_path.iterdir()) == []


# --- lockgate proxy --record ------------------------------------------------------------------


ACCEPTED = Turn(
    reply=Reply(
        "r1",
        (Say(f"Keys: {HELD} {TOKEN} {CLIENT} {EXTRA}.", pieces=1), Call("call_1", "edit", EDIT)),
    )
)
INVALID = Turn(reply=Reply("r2", (Call("call_1", "edit", EDIT), Call("call_2", "rm_rf", {"x": 1}))))
LIMITED = Turn(
    status=429,
    body={"error": {"message": f"slow down {CLIENT}", "type": "rate_limit", "code": "rate"}},
    headers={"retry-after": "7"},
)


async def post(url: str, body: Any) -> tuple[int, bytes]:
    headers = {
        "content-type": "application/json",
        "authorization": f"Bearer {TOKEN}",  # the token, as the client's own key
        "x-api-key": CLIENT,  # and a credential of the client's own
        "cookie": f"session={CLIENT}",
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=json.dumps(body), headers=headers) as response,
    ):
        return response.status, await response.read()


async def test_the_proxy_records_each_exchange_with_its_verdict(tmp_path: Path) -> None:
    records: list[ProxyRecord] = []
    request = {**request_for("chat"), "user": f"client {CLIENT}"}
    gating = GatingOptions(idle_timeout=10.0, deadline=60.0, validate_schemas=True)
    async with serve_script([ACCEPTED, INVALID, LIMITED], provider="chat") as upstream:
        config = ProxyConfig(
            f"http://127.0.0.1:{upstream.port}",
            gating=gating,
            api_key=HELD,
            client_token=TOKEN,
            record=tmp_path,
            redact=(EXTRA,),
        )
        async with serving(config, records.append) as proxy:
            url = proxy.url + "/v1/chat/completions"
            answers = [await post(url, request) for _ in range(3)]
            assert proxy.recorder is not None
            assert proxy.recorder.errors == []
        sent = [r.headers.get("authorization") for r in upstream.requests]
    assert [status for status, _ in answers] == [200, 200, 429]
    assert [r.outcome for r in records] == ["passed", "withheld", "forwarded"]
    assert sent == ["Bearer [redacted]"] * 3  # the held key went upstream
    recorded = load_all(tmp_path)
    assert [c.verdict for c in recorded] == [
        Verdict("accepted", None, 1),
        Verdict("refused", "invalid_batch", 2),
        None,  # an error answer passes unjudged
    ]
    for cassette in recorded:
        assert (cassette.protocol, cassette.method, cassette.path) == (
            "chat", "POST", "/v1/chat/completions",
        )  # fmt: skip
        assert cassette.base_url == f"http://127.0.0.1:{upstream.port}"
        assert cassette.request["user"] == "client [redacted]"
    assert [c.status for c in recorded] == [200, 200, 429]
    assert recorded[2].header("retry-after") == "7"
    assert b"slow down [redacted]" in recorded[2].body
    assert b"[redacted] [redacted] [redacted] [redacted]" in recorded[0].body
    # every other byte as the client received it
    assert recorded[0].body == SecretScrubber([HELD, TOKEN, CLIENT, EXTRA]).data(answers[0][1])
    assert_no_secret(tmp_path, HELD, TOKEN, CLIENT, EXTRA)
