"""`lockgate lab --cassettes DIR [--budget N] [--seed S]`: the command on scripted cassettes
(its table, its closing line, its exit codes, `--json`), its usage errors, and the lab on the
whole real-streams corpus converted by `lockgate cassette import` (`../shared/real-streams`,
skipped where absent), on a seeded sample of the fault points that keeps it fast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lockgate.cassette.faults import fault_points
from lockgate.cassette.format import Verdict, load_all, save

from ..helpers import CLI, ROOT
from .test_judge import scripted, text_and_call

CORPUS = ROOT.parent / "shared" / "real-streams"
CORPUS_BUDGET = 1500  # faulted runs drawn over the whole corpus (of ~86,000 fault points)


def _folder(tmp_path: Path, verdicts: dict[str, Verdict | None]) -> Path:
    folder = tmp_path / "cassettes"
    folder.mkdir()
    for provider, verdict in verdicts.items():
        name = f"{provider}.cassette.jsonl"
        save(scripted(provider, text_and_call(), verdict=verdict, name=name), folder / name)
    return folder


def test_every_fault_point_of_every_cassette_runs(tmp_path: Path, cli: CLI) -> None:
    folder = _folder(tmp_path, {"responses": Verdict("accepted", None, 1), "gemini": None})
    result = cli("lab", "--cassettes", str(folder))
    assert result.code == 0, result.output
    expected = sum(1 + len(fault_points(c)) for c in load_all(folder))
    assert result.out.strip().splitlines()[-1] == f"{expected} runs, 0 violations"
    for name in ("responses.cassette.jsonl", "gemini.cassette.jsonl"):
        assert name in result.out


def test_a_violation_is_exit_1_with_its_line(tmp_path: Path, cli: CLI) -> None:
    folder = _folder(tmp_path, {"chat": Verdict("accepted", None, 3)})
    result = cli("lab", "--cassettes", str(folder), "--budget", "2")
    assert result.code == 1
    assert "VIOLATION chat.cassette.jsonl unfaulted: the recorded verdict accepted 3" in result.out
    assert result.out.strip().splitlines()[-1] == "3 runs, 1 violations"


def test_json_records(tmp_path: Path, cli: CLI) -> None:
    folder = _folder(tmp_path, {"anthropic": Verdict("accepted", None, 1)})
    result = cli("lab", "--cassettes", str(folder), "--budget", "5", "--seed", "3", "--json")
    assert result.code == 0, result.output
    records = [json.loads(line) for line in result.out.splitlines()]
    assert [r["event"] for r in records] == ["lab_cassette", "lab_cassettes"]
    row, summary = records
    assert row["cassette"] == "anthropic.cassette.jsonl"
    assert row["protocol"] == "anthropic"
    assert row["runs"] == 6
    assert row["accepted"] + row["refused"] == 6
    assert row["unfaulted"] == "accepted"
    assert row["decision"]["calls"] == [{"name": "read", "arguments": '{"path":"calculator.py"}'}]
    assert summary == {"event": "lab_cassettes", "runs": 6, "violations": 0, "undetectable": 0}
    again = cli("lab", "--cassettes", str(folder), "--budget", "5", "--seed", "3", "--json")
    assert again.out == result.out  # the same seed draws the same faults


def test_provider_filters_the_cassettes(tmp_path: Path, cli: CLI) -> None:
    folder = _folder(tmp_path, {"responses": None, "chat": None})
    result = cli("lab", "--cassettes", str(folder), "--provider", "chat", "--budget", "1")
    assert result.code == 0, result.output
    assert "chat.cassette.jsonl" in result.out
    assert "responses.cassette" not in result.out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--scenario", "clean"], "leave out --scenario"),
        (["--via", "proxy"], "leave out --via"),
        (["--transport", "http"], "leave out --transport"),
    ],
)
def test_usage_errors(tmp_path: Path, cli: CLI, extra: list[str], message: str) -> None:
    folder = _folder(tmp_path, {"chat": None})
    result = cli("lab", "--cassettes", str(folder), *extra)
    assert result.code == 2
    assert message in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_a_missing_or_empty_folder_is_one_line(tmp_path: Path, cli: CLI) -> None:
    missing = cli("lab", "--cassettes", str(tmp_path / "nope"))
    assert missing.code == 2
    assert "nope" in missing.err
    (tmp_path / "empty").mkdir()
    empty = cli("lab", "--cassettes", str(tmp_path / "empty"))
    assert empty.code == 2
    assert "no *.cassette.jsonl" in empty.err
    for outcome in (missing, empty):
        assert len(outcome.err.strip().splitlines()) == 1
        assert "Traceback" not in outcome.err


def test_budget_needs_cassettes(cli: CLI) -> None:
    result = cli("lab", "--budget", "3")
    assert result.code == 2
    assert "--budget is for --cassettes" in result.err


@pytest.mark.skipif(
    not CORPUS.is_dir(),
    reason=f"no real recordings at {CORPUS} (they live beside the project in the development "
    "workspace, not in a clone)",
)
def test_the_lab_on_the_converted_real_streams_corpus(tmp_path: Path, cli: CLI) -> None:
    """Every real recording of a protocol lockgate speaks, converted, then judged unfaulted
    and under a seeded sample of `CORPUS_BUDGET` of its fault points (the whole set, ~86,000
    runs, takes minutes: run `lockgate lab --cassettes DIR` by hand)."""
    target = tmp_path / "corpus"
    converted = cli("cassette", "import", str(CORPUS), "--to", str(target))
    assert converted.code == 0, converted.output
    written = len(list(target.glob("*.cassette.jsonl")))
    recordings = list(CORPUS.glob("*.json"))  # Bedrock's binary recordings among them
    assert written == len(recordings)
    assert len(list(target.glob("bedrock-*.cassette.jsonl"))) == 36
    result = cli("lab", "--cassettes", str(target), "--budget", str(CORPUS_BUDGET), "--json")
    records = [json.loads(line) for line in result.out.splitlines()]
    summary = records[-1]
    violations = [r for r in records if r["event"] == "lab_cassette_violation"]
    assert summary["runs"] == written + CORPUS_BUDGET
    # Only drops, duplicates and swaps of events on protocols without event numbers may
    # change a release (`judge.UNNUMBERED`): never a cut, a reset, a stall, a split, a
    # status or a corrupted terminal event, and never on Responses.
    for change in (r for r in records if r["event"] == "lab_cassette_undetectable"):
        assert change["fault"].split(":")[0] in {"drop", "duplicate", "reorder"}, change
        assert not change["cassette"].startswith("responses-"), change
    assert not violations, "\n".join(
        f"{v['cassette']} {v['fault']}: {v['reason']}" for v in violations
    )
    assert result.code == 0
