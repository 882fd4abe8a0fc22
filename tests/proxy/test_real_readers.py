"""The real readers in the suite (issue 27): a bounded run of `real_differential` — mutated
real recordings through `lockgate proxy` (in process, loopback) and through the transport
(`gated_client()`), read by the installed openai, anthropic, google-genai and litellm
libraries — must find nothing: no reader ends with (or holds, when it raised) a call the
gate did not release, arguments the gate's rules refuse, or a whole recording read
otherwise through the gate than directly.

The default budget (`real_differential.DEFAULT_BUDGET` cases, seed `DEFAULT_SEED`) takes
seconds; `python -m tests.proxy.real_differential --budget N --seed S` runs more. The
findings of the mutations whose fix is in progress elsewhere (`real_mutations.KNOWN`) are
asserted apart from the new ones, so that each test says which it is: both fail while any
is found (nothing is skipped or expected to fail).

Skipped, with the reason, where `../shared/real-streams` is absent (a clone) or litellm is
not installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket

import pytest

from .differential import CORPUS

if not CORPUS.is_dir():
    pytest.skip(
        f"no real recordings at {CORPUS} (they live beside the project in the development "
        "workspace, not in a clone)",
        allow_module_level=True,
    )
if importlib.util.find_spec("litellm") is None:
    pytest.skip("litellm is not installed (a reader of the differential)", allow_module_level=True)

from lockgate.conversation import ToolCall

from .differential import load
from .real_differential import (
    DEFAULT_BUDGET,
    DEFAULT_SEED,
    Totals,
    differential,
    report,
    run_cases,
    shaped,
)
from .real_mutations import KNOWN
from .real_readers import (
    LITELLM_WARNING,
    READERS,
    REFUSED,
    UNPARSED,
    HeldCall,
    Read,
    findings,
    loopback_only,
    strict_problem,
)

RECORDINGS = load(CORPUS)
# litellm's logging, after a stream, dumps the thinking blocks it keeps into a model field
# typed `str` (its own pydantic warning, not a finding).
pytestmark = pytest.mark.filterwarnings(f"ignore:{LITELLM_WARNING}:UserWarning")


@pytest.fixture(scope="module")
def totals(pytestconfig: pytest.Config) -> Totals:
    result = differential(RECORDINGS, DEFAULT_BUDGET, DEFAULT_SEED)
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print("\n" + "\n".join(report(result, RECORDINGS, show=20)))
    return result


def test_every_reader_read_accepted_and_refused_streams(totals: Totals) -> None:
    # The run cannot pass vacuously: every case ran, every reader read, both verdicts came.
    assert totals.errors == []
    assert totals.cases == DEFAULT_BUDGET
    assert {reader.name for reader in READERS} <= {name for name, n in totals.reads.items() if n}
    assert totals.accepted > 0
    assert totals.refused > 0


def test_no_new_finding(totals: Totals) -> None:
    # A finding of a mutation no fix in progress covers: new, and important.
    assert [finding.line() for finding in totals.new] == []


def test_no_known_finding_left(totals: Totals) -> None:
    # Findings of the mutations whose fix is in progress elsewhere (`real_mutations.KNOWN`):
    # this fails until every one of those fixes is merged.
    left = sorted({f"{finding.known}: {finding.line()}" for finding in totals.known})
    assert left == [], f"{len(left)} known findings left, waiting for: " + "; ".join(
        sorted({str(finding.known) for finding in totals.known})
    )
    assert set(KNOWN)  # the list names what is being fixed


# --- pinned cases ----------------------------------------------------------------------------

# One case per variant the fuzz found (recording, shape mutation, seed; the variant in the
# comment). Those marked known find something until the fix in progress for their mutation
# (`KNOWN`) is merged; those marked NEW find what no fix in progress covers (openai-python
# concatenates a repeated id or name: see issue 27's report); the others found nothing, and
# must not.
PINNED = (
    ("chat-crewAI-2.json", "chat index", 1),  # indexes with gaps (known)
    ("chat-magentic-4.json", "chat index", 0),  # indexes reversed (known)
    ("chat-crewAI-3.json", "chat index", 0),  # index null
    ("chat-crewAI-2.json", "chat index", 0),  # index missing beside indexed calls
    ("chat-crewAI-1.json", "chat index", 0),  # negative indexes
    ("chat-crewAI-6.json", "chat index", 1),  # a new id at an index in use
    ("chat-crewAI-1.json", "chat repeated fragment", 1),  # the name again (NEW)
    ("chat-crewAI-1.json", "chat repeated fragment", 0),  # the id again (NEW)
    ("anthropic-llm-anthropic-2.json", "anthropic start input", 1),  # deltas dropped (known)
    ("anthropic-crewAI-1.json", "anthropic start input", 0),  # deltas kept
    ("responses-crewAI-1.json", "responses custom tool", 0),  # grammar unmet (known)
    ("chat-crewAI-2.json", "json in arguments", 0),  # a duplicate key, decoy first (known)
    ("responses-mirascope-12.json", "json in arguments", 1),  # duplicate, decoy last (known)
    ("chat-crewAI-3.json", "json in arguments", 0),  # a lone surrogate escape (known)
    ("anthropic-crewAI-1.json", "json in arguments", 0),  # a lone surrogate escape (known)
    ("gemini-crewAI-1.json", "json in arguments", 0),  # a raw lone surrogate (known)
    ("anthropic-magentic-5.json", "json in arguments", 2),  # Infinity
    ("anthropic-magentic-5.json", "json in arguments", 1),  # an integer beyond 2^53
)
_BY_NAME = {recording.name: recording for recording in RECORDINGS}


@pytest.mark.parametrize(
    ("name", "shape", "seed"), PINNED, ids=[f"{n}-{s}-{seed}" for n, s, seed in PINNED]
)
def test_a_pinned_case_finds_nothing(name: str, shape: str, seed: int) -> None:
    case = shaped(_BY_NAME[name], shape, seed)
    found = run_cases(lambda totals: [case], Totals())
    assert found.errors == []
    waiting = f" (known, waiting for: {KNOWN[shape]})" if shape in KNOWN else ""
    assert [finding.line() for finding in found.findings] == [], case.label + waiting


# --- the rules of a finding -------------------------------------------------------------------


def _read(*calls: HeldCall, raised: str | None = None) -> Read:
    return Read("r", "proxy", calls, "", raised)


RELEASED = (ToolCall("call_1", "read", {"path": "a"}, '{"path": "a"}'),)


def test_a_call_of_a_refused_stream_is_a_finding() -> None:
    call = HeldCall("call_1", "read", '{"path": "a"}', {"path": "a"})
    assert findings(_read(call), None, {}) != []
    assert findings(_read(), None, {}) == []


def test_a_call_is_one_released_only_with_its_id_name_and_argument_bytes() -> None:
    same = HeldCall("call_1", "read", '{"path": "a"}', {"path": "a"})
    assert findings(_read(same), RELEASED, {}) == []
    assert findings(_read(HeldCall(None, "read", None, {"path": "a"})), RELEASED, {}) == []
    for other in (
        HeldCall("call_2", "read", '{"path": "a"}', {"path": "a"}),
        HeldCall("call_1", "edit", '{"path": "a"}', {"path": "a"}),
        HeldCall("call_1", "read", '{"path":"a"}', {"path": "a"}),
        HeldCall("call_1", "read", None, {"path": "b"}),
        HeldCall("call_1", "read", None, {"path": ["a"]}),
    ):
        assert findings(_read(other), RELEASED, {}) != [], other
    # A reader that raised while a call's text was not yet JSON holds nothing to act on.
    partial = HeldCall("call_9", "read", '{"pa', UNPARSED)
    assert findings(_read(partial, raised="E"), RELEASED, {}) == []


def test_strict_json_as_the_gate_rules_have_it() -> None:
    assert strict_problem('{"a": 1, "b": [1.5, "x"]}') is None
    assert strict_problem('{"a": 18446744073709551617}') is None
    assert strict_problem('{"a": 1, "a": 2}') == "a duplicate key"
    assert strict_problem('{"a": "\\ud83d"}') == "a lone surrogate"
    assert strict_problem('{"a": NaN}') is not None
    assert strict_problem('{"a": -Infinity}') is not None


def test_nothing_leaves_loopback() -> None:
    # The guard every run is under: a connection or a lookup beyond loopback raises before
    # it is made (192.0.2.1 is TEST-NET-1, documentation only), and is counted.
    before = len(REFUSED)
    with loopback_only(), pytest.raises(OSError, match="loopback only"):
        socket.create_connection(("192.0.2.1", 9), timeout=0.1)
    with loopback_only(), pytest.raises(OSError, match="loopback only"):
        socket.getaddrinfo("api.openai.com", 443)
    assert len(REFUSED) == before + 2
    del REFUSED[before:]
