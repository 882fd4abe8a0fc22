"""The API key never appears in any output, for any scenario, provider or unusable key.

Every lab scenario's turns are served over loopback HTTP in the scenario's own protocol and
run through the real CLI (in-process, so the whole catalogue stays fast); keys that cannot be
used are refused without echo; keys a server echoes are redacted.
"""

from __future__ import annotations

import json
import re

import pytest

from lockgate.cli import main
from lockgate.credentials import Redactor
from lockgate.errors import FailureKind
from lockgate.lab.scenarios import SCENARIOS
from lockgate.providers import PROVIDERS
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.scripted.script import Turn

from ..helpers import (
    CLI,
    KEY,
    ServerThread,
    closing,
    final_record,
    json_records,
    requests_of,
    serve,
    stop_kind,
    text_turn,
    usage_error_line,
)

# main() runs in this process: keep its signal handlers, hook and dumpability.
pytestmark = pytest.mark.usefixtures("in_process_main")

FAKE_KEY = "sk-proj-LOCKGATE-SECRET-4d6f2a9b7c1e"
PROVIDER_NAMES = sorted(PROVIDERS)


def run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    provider: str,
    base_url: str,
    *extra: str,
) -> tuple[int, str, str]:
    monkeypatch.setenv(PROVIDERS[provider].key_variable, FAKE_KEY)
    arguments = ["run", "--provider", provider, "--base-url", base_url, "--allow-execution"]
    code = main([*arguments, "--idle-timeout", "1", "--deadline", "20", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _provider_for(index: int, protocols: frozenset[str] | None) -> str:
    """Neutral scenarios rotate over every provider; the others run on their own."""
    choices = PROVIDER_NAMES if protocols is None else sorted(protocols)
    return choices[index % len(choices)]


# Every scenario's turns (success, each HTTP error, each stream fault); `cancellation` hangs
# and ends at the idle timeout here. Alternate human and --json output.
CASES = [
    (scenario.name, _provider_for(index, scenario.protocols), index % 2 == 1)
    for index, scenario in enumerate(SCENARIOS)
]


@pytest.mark.parametrize(
    ("name", "provider", "json_lines"), CASES, ids=[f"{n}-{p}" for n, p, _ in CASES]
)
def test_key_never_printed(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    provider: str,
    json_lines: bool,
) -> None:
    scenario = next(s for s in SCENARIOS if s.name == name)
    with ServerThread(scenario.turns(), provider=provider) as server:
        code, out, err = run(
            monkeypatch, capsys, provider, server.base_url, *(["--json"] if json_lines else [])
        )
        assert server.server is not None
        recorded = [r.headers for r in server.server.requests]
    assert code in (0, 1, 130), err
    assert recorded, "the server saw no request"
    assert all(FAKE_KEY not in repr(headers) for headers in recorded)
    # (The fixture's own failing unit test prints a traceback inside a one-line tool result.)
    assert not any(line.startswith("Traceback") for line in err.splitlines())
    assert FAKE_KEY not in out
    assert FAKE_KEY not in err
    assert FAKE_KEY[8:] not in out + err
    assert FAKE_KEY[:20] not in out + err


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
def test_key_echoed_by_a_hostile_server_is_redacted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], provider: str
) -> None:
    echo = Turn(
        status=401,
        body={
            "type": "error",
            "error": {
                "type": "authentication_error",
                "message": f"Incorrect API key provided: {FAKE_KEY}.",
                "code": "invalid_api_key",
            },
        },
    )
    for extra in ((), ("--json",)):
        with ServerThread([echo], provider=provider) as server:
            code, out, err = run(monkeypatch, capsys, provider, server.base_url, *extra)
        assert code == 1
        assert FAKE_KEY not in out + err
        stopped = final_record(out)["stopped"] if extra else closing(out).stopped
        assert stop_kind(stopped) == FailureKind.OPENING
        assert stopped.endswith(": Incorrect API key provided: [redacted].)"), stopped


# Printable ASCII, so accepted: a backslash and a quote, which `repr` escapes its own way.
ESCAPING_KEY = "sk-LOCK\\GATE'SECRET\"7f3a"


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
def test_a_key_in_repr_form_is_redacted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], provider: str
) -> None:
    # Audit 3, M2: the read tool's `unknown file '…'` observation and the invalid batch's
    # `tool '…' is not exposed` quote values with `!r` (the backslash doubled).
    from lockgate.scripted.reply import Call, Reply
    from lockgate.scripted.scenario import reply_turn

    turns = [
        reply_turn(Reply("resp_echo_1", (Call("call_1", "read", {"path": ESCAPING_KEY}),))),
        reply_turn(Reply("resp_echo_2", (Call("call_2", ESCAPING_KEY, "{}"),))),
    ]
    escaped = ESCAPING_KEY.replace("\\", "\\\\")
    for extra in ((), ("--json",)):
        monkeypatch.setenv(PROVIDERS[provider].key_variable, ESCAPING_KEY)
        with ServerThread(list(turns), provider=provider) as server:
            arguments = ["run", "--provider", provider, "--base-url", server.base_url]
            code = main([*arguments, "--idle-timeout", "1", *extra])
        captured = capsys.readouterr()
        printed = captured.out + captured.err
        assert code == 1, printed
        stopped = final_record(captured.out)["stopped"] if extra else closing(captured.out).stopped
        assert stop_kind(stopped) == FailureKind.INVALID_BATCH
        for form in (ESCAPING_KEY, escaped, ESCAPING_KEY.replace("'", "\\'"), "LOCK\\\\GATE"):
            assert form not in printed
        assert "[redacted]" in printed


# --- unusable keys, echoed keys ----------------------------------------------------------


BAD_KEYS = [
    "sk-abc\nsecond-line",
    "sk-abc\r\nsecond-line",
    "sk-abcdef\tsecond",
    "sk-abcdef second",
    "sk-abcdefé-second",
    "sk-abcdef\u200bhidden",
    "sk-abcdef\x1b[31mred",
]


def key_parts(key: str) -> list[str]:
    """Every 4-character window of the key, and its pieces between odd characters."""
    windows = [key[i : i + 4] for i in range(len(key) - 3)]
    pieces = [p for p in re.split(r"[^A-Za-z0-9_-]", key) if len(p) > 3]
    return windows + pieces


@pytest.mark.parametrize("json_lines", [False, True], ids=["human", "json"])
@pytest.mark.parametrize("key", BAD_KEYS, ids=[repr(k) for k in BAD_KEYS])
def test_an_unusable_key_is_a_usage_error_without_echo(
    cli: CLI, key: str, json_lines: bool
) -> None:
    with serve([text_turn()]) as server:
        result = cli("run", "--base-url", server.base_url, *(["--json"] * json_lines), key=key)
        assert requests_of(server) == []
    rule = (
        "contains non-ASCII characters, which HTTP headers cannot carry"
        if "é" in key
        else "contains whitespace or control characters"
    )  # it names the variable and the rule, never the key
    assert usage_error_line(result) == (
        f"lockgate: OPENAI_API_KEY: the API key {rule}; no request was made"
    )
    for part in key_parts(key):
        assert part not in result.output, part


@pytest.mark.parametrize("key", ["a", "ab", "abc"])
def test_keys_under_four_characters_are_refused(cli: CLI, key: str) -> None:
    with serve([text_turn()]) as server:
        result = cli("run", "--base-url", server.base_url, key=key)
        assert requests_of(server) == []
    assert usage_error_line(result) == (
        "lockgate: OPENAI_API_KEY: the API key is too short to be kept out of output "
        "(under 4 chars); no request was made"
    )


QUOTED_KEY = 'sk-quote"inside\\slash-1f2e3d4c'


def echo_text_turn(key: str) -> Turn:
    """The key echoed in answer text, cut in two across two text deltas."""
    half = len(key) // 2
    text = f"Your key is {key[:half]}" + f"{key[half:]}, thanks."
    builder = ResponseBuilder("resp_echo").created()
    cut = len(f"Your key is {key[:half]}")
    builder.text("msg", text, pieces=2)
    for event in builder.events:  # re-cut the two deltas exactly inside the key
        if event["type"] == "response.output_text.delta":
            event["delta"] = text[:cut] if "Your key" in event["delta"] else text[cut:]
    return builder.completed().turn()


def shown_text(stdout: str, json_lines: bool) -> str:
    """The answer text as shown: the `text_delta` records joined, or the indented lines
    before the closing lines."""
    if json_lines:
        return "".join(r["text"] for r in json_records(stdout) if r["event"] == "text_delta")
    shown = stdout.split("\nstopped: ", 1)[0].splitlines()
    assert all(line.startswith("  ") for line in shown if line), shown
    return "\n".join(line.removeprefix("  ") for line in shown).strip("\n")


@pytest.mark.parametrize("json_lines", [False, True], ids=["human", "json"])
@pytest.mark.parametrize("key", [KEY, QUOTED_KEY], ids=["plain", "quote-and-backslash"])
def test_a_key_echoed_across_two_deltas_is_redacted(cli: CLI, key: str, json_lines: bool) -> None:
    with serve([echo_text_turn(key)]) as server:
        result = cli("run", "--base-url", server.base_url, *(["--json"] * json_lines), key=key)
        [request] = requests_of(server)
    assert result.code == 0, result.output
    assert request.headers["authorization"] == "Bearer [redacted]"
    encoded = json.dumps(key)[1:-1]
    for form in {key, encoded, key[: len(key) // 2 + 2], encoded[: len(encoded) // 2 + 2]}:
        assert form not in result.output
    assert shown_text(result.out, json_lines) == "Your key is [redacted], thanks."


@pytest.mark.parametrize("json_lines", [False, True], ids=["human", "json"])
def test_a_key_echoed_in_an_error_body_is_redacted(cli: CLI, json_lines: bool) -> None:
    body = {"error": {"message": f"bad key {QUOTED_KEY} (really)", "code": "server_error"}}
    with serve([Turn(status=500, body=body)]) as server:
        result = cli(
            "run",
            "--base-url",
            server.base_url,
            "--retry-attempts",
            "1",
            *(["--json"] * json_lines),
            key=QUOTED_KEY,
        )
    assert result.code == 1
    assert QUOTED_KEY not in result.output
    assert json.dumps(QUOTED_KEY)[1:-1] not in result.output
    stopped = final_record(result.out)["stopped"] if json_lines else closing(result.out).stopped
    assert (
        stopped == "provider_failure (opening: HTTP 500 server_error: bad key [redacted] (really))"
    )


def test_a_very_long_key_is_redacted_in_linear_time(cli: CLI) -> None:
    """Preparing the stream redactor listed every prefix of the key: quadratic (an
    8,000-character key took 44 s and 3 GB before the run even started)."""
    key = "sk-" + "Ab3x" * 5_000
    # What keeps it linear: the redactor prepares a few forms of the key, not its prefixes
    # (the time it takes is measured in benchmarks/startup.py).
    assert len(Redactor([key])._holdable) <= 8
    with serve([echo_text_turn(key)]) as server:
        result = cli("run", "--base-url", server.base_url, key=key)
    assert result.code == 0, result.err[-500:]
    assert key[:200] not in result.output
    assert shown_text(result.out, json_lines=False) == "Your key is [redacted], thanks."
