"""The Gemini provider's own lab scenarios: the rules and quirks only this protocol has
(where the finish rides, calls without ids, signatures that come late, the fail-closed
finish reasons, error chunks, a blocked prompt, a second candidate, usage as a running
total, Google's error details), beside the neutral scenarios every protocol runs
(`lockgate.lab.scenarios`), of which `NEUTRAL_NOT_EXPRESSIBLE` names those no Gemini stream
can play."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...errors import FailureKind
from ...scripted.reply import ReplyUsage
from ...scripted.scenario import (
    EDIT_FIX,
    Expectation,
    LabOptions,
    Observation,
    Scenario,
    answered,
    failure,
    finished,
    own,
    stopped_with,
    text_turn,
    waited,
)
from ...scripted.script import Faults, Turn
from ..decoding import usage_from
from .decoder import SIGNATURE, USAGE_FIELDS
from .options import GeminiOptions
from .render import (
    PER_DAY,
    PER_MINUTE,
    ChunkBuilder,
    _parts,
    base64_signature,
    google_error,
    quota_failure,
    retry_info,
    usage_metadata,
)

__all__ = ["NEUTRAL_NOT_EXPRESSIBLE", "SCENARIOS"]

# The neutral scenarios no Gemini stream can play, and why.
NEUTRAL_NOT_EXPRESSIBLE: dict[str, str] = {
    "refusal": "Gemini has no refusal signal: a model's refusal is answer text (model_finished)",
    "recover-malformed": "a call whose arguments are not JSON never reaches the client: the "
    "provider ends the response MALFORMED_FUNCTION_CALL, with no call to pair an observation to",
    "recovery-budget": "the same: a MALFORMED_FUNCTION_CALL has no call to answer, so there is "
    "nothing to recover from",
    "recover-truncated": "a call cut off by the output limit is never sent (calls arrive "
    "whole), so MAX_TOKENS leaves no call to answer",
}


SIGNATURE_VALUE = base64_signature("lockgate lab: a thought signature, replayed unchanged")
LATE_SIGNATURE = base64_signature("lockgate lab: a signature that came after its call")
THOUGHT = "The README says add must add; calculator.py subtracts."
THINKING_BUDGET = 512  # below Anthropic's 1024 minimum: Gemini has none of its own
SERVER_ID = "u4k2x9qa"
READ_README = {"path": "README.md"}
READ_CALCULATOR = {"path": "calculator.py"}


def _answer(response_id: str = "gemini-answer", text: str = "Fixed.") -> Turn:
    return ChunkBuilder(response_id).text(text, 2).finish().turn()


def _model_turns(request: Mapping[str, Any]) -> list[list[dict[str, Any]]]:
    return [
        _parts(content)
        for content in request.get("contents", [])
        if isinstance(content, dict) and content.get("role") == "model"
    ]


def _user_turn_after(request: Mapping[str, Any], model_turn: int) -> list[dict[str, Any]]:
    """The parts of the content right after the `model_turn`-th model content."""
    contents = [c for c in request.get("contents", []) if isinstance(c, dict)]
    seen = -1
    for index, content in enumerate(contents):
        if content.get("role") == "model":
            seen += 1
            if seen == model_turn:
                following = contents[index + 1] if index + 1 < len(contents) else {}
                return _parts(following) if following.get("role") == "user" else []
    return []


def _exact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _edit_separate_finish_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-3x-1").text("Fixing the add function.", 2)
    builder.call("edit", EDIT_FIX, SERVER_ID, signature=SIGNATURE_VALUE)
    return [builder.finish().turn(), _answer()]


def check_separate_finish(observation: Observation) -> list[str]:
    replayed = _model_turns(observation.requests[1])[0]
    expected = [
        {"text": "Fixing the add function."},
        {
            "functionCall": {"name": "edit", "args": EDIT_FIX, "id": SERVER_ID},
            SIGNATURE: SIGNATURE_VALUE,
        },
    ]
    problems = []
    if _exact(replayed) != _exact(expected):
        problems.append(f"the model turn was not replayed exactly: {replayed}")
    if not observation.protocol.tool_result(observation.requests[1], SERVER_ID):
        problems.append("the result does not answer the call by its server id")
    return problems


def _call_with_finish_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-2x-1", index=None)
    builder.call("edit", EDIT_FIX, finish="STOP")
    return [builder.turn(), _answer()]


def _no_ids_sent(observation: Observation, calls: int) -> list[str]:
    request = observation.requests[1]
    replayed = [p["functionCall"] for p in _model_turns(request)[0] if "functionCall" in p]
    results = [p.get("functionResponse", {}) for p in _user_turn_after(request, 0)]
    problems = []
    if len(replayed) != calls or len(results) != calls:
        problems.append(f"{len(replayed)} calls and {len(results)} results, expected {calls}")
    if any("id" in call for call in replayed) or any("id" in result for result in results):
        problems.append("an id the server never sent was sent back")
    names = [call.get("name") for call in replayed]
    if [result.get("name") for result in results] != names:
        problems.append("the results do not answer the calls by name, in order")
    if not all("result" in result.get("response", {}) for result in results):
        problems.append("a successful result is not under response.result")
    return problems


def check_call_with_finish(observation: Observation) -> list[str]:
    return _no_ids_sent(observation, 1)


def _late_signature_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-late-1").call("edit", EDIT_FIX)
    builder.chunk([{"text": "", SIGNATURE: LATE_SIGNATURE}], "STOP")
    return [builder.turn(), _answer()]


def check_late_signature(observation: Observation) -> list[str]:
    replayed = _model_turns(observation.requests[1])[0]
    expected = [{"functionCall": {"name": "edit", "args": EDIT_FIX}, SIGNATURE: LATE_SIGNATURE}]
    if _exact(replayed) != _exact(expected):
        return [f"the late signature was not replayed on its call: {replayed}"]
    return []


CRLF_ANSWER = "CRLF frames, cut between CR and LF: the bug is in add."


def _crlf_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-crlf").text(CRLF_ANSWER, 5).finish()
    return [builder.turn(faults=Faults(fragment_sizes=(1, 2, 3, 5, 7)))]


def _finish_with_call(reason: str, *, text: str = "Editing.") -> list[Turn]:
    builder = ChunkBuilder(f"gemini-{reason.lower()}").text(text, 2)
    return [builder.call("edit", EDIT_FIX, finish=reason).turn()]


def _safety_turns() -> list[Turn]:
    return _finish_with_call("SAFETY")


def _recitation_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-recitation").text("Here is the licensed text:", 2)
    return [builder.call("edit", EDIT_FIX).chunk(None, "RECITATION").turn()]


def _malformed_call_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-malformed").text("Editing.", 2)
    return [builder.malformed_call("edit").turn()]


def _malformed_after_call_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-malformed-parsed").call("edit", EDIT_FIX)
    return [builder.malformed_call("test").turn()]


def _max_tokens_turns() -> list[Turn]:
    return _finish_with_call("MAX_TOKENS")


def _max_tokens_recover_turns() -> list[Turn]:
    first = ChunkBuilder("gemini-truncated").call("edit", EDIT_FIX, finish="MAX_TOKENS")
    second = ChunkBuilder("gemini-reissued").call("edit", EDIT_FIX).finish()
    return [first.turn(), second.turn(), _answer()]


def check_max_tokens_recover(observation: Observation) -> list[str]:
    results = [p.get("functionResponse", {}) for p in _user_turn_after(observation.requests[1], 0)]
    if len(results) != 1 or results[0].get("name") != "edit" or "id" in results[0]:
        return [f"the truncated call was not answered once, by name, without an id: {results}"]
    said = results[0].get("response", {}).get("error", "")
    if not str(said).startswith("error: the response was truncated by the output limit"):
        return [f"the truncated call was not answered with the truncation error: {said!r}"]
    return []


def _reset_before_finish_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-reset").text("Editing.", 2).call("edit", EDIT_FIX).finish()
    return [builder.turn(faults=Faults(reset_after=3))]  # after the call, before the finish


def _error_chunk_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-error").text("Starting the fix.", 2)
    return [builder.error(503, "The model is overloaded. Please try again later.").turn()]


def _error_first_turns() -> list[Turn]:
    first = ChunkBuilder("gemini-error-first").error(500, "An internal error has occurred.")
    return [first.turn(), text_turn("gemini-after-error", "Answered after the error.")]


def _blocked_prompt_turns() -> list[Turn]:
    return [ChunkBuilder("gemini-blocked").blocked("PROHIBITED_CONTENT").turn()]


def _parallel_without_ids_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-parallel", index=None)
    parts = [builder.call_part("read", READ_README), builder.call_part("read", READ_CALCULATOR)]
    return [builder.chunk(parts, "STOP").turn(), _answer(text="Both read.")]


def check_parallel_without_ids(observation: Observation) -> list[str]:
    problems = _no_ids_sent(observation, 2)
    replayed = [p["functionCall"]["args"] for p in _model_turns(observation.requests[1])[0]]
    if replayed != [READ_README, READ_CALCULATOR]:
        problems.append(f"the calls were not replayed in order: {replayed}")
    return problems


def _second_candidate_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-n2").text("One answer.", 2)
    return [builder.chunk([{"text": "Another answer."}], "STOP", index=1).turn()]


RUNNING_USAGE = ReplyUsage(input_tokens=900, cached_input_tokens=512, output_tokens=70)


def _running_usage_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-usage", usage=RUNNING_USAGE).text("Counted once.", 4)
    return [builder.finish(final=False).usage_only().turn()]


def check_running_usage(observation: Observation) -> list[str]:
    wanted = usage_from(usage_metadata(RUNNING_USAGE), USAGE_FIELDS)
    if observation.usage != wanted:
        return [f"usage {observation.usage}, expected the last running total {wanted}"]
    return []


def _content_after_finish_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-after-finish").text("Looking.", 2).finish()
    return [builder.call("edit", EDIT_FIX).turn()]


def _spliced_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-first").text("Reading.", 2)
    builder.response_id = "gemini-second"  # a second response's call, with its finish
    return [builder.call("edit", EDIT_FIX, finish="STOP").turn()]


def _thinking_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-think", usage=ReplyUsage(output_tokens=90, reasoning_tokens=60))
    builder.thought(THOUGHT, 3).text("Fixing add.", 2, signature=SIGNATURE_VALUE)
    builder.call("edit", EDIT_FIX)
    return [builder.finish().turn(), _answer()]


def check_thinking(observation: Observation) -> list[str]:
    problems = []
    config = observation.requests[0].get("generationConfig")
    wanted = {
        "maxOutputTokens": THINKING_BUDGET + 2048,
        "thinkingConfig": {"thinkingBudget": THINKING_BUDGET, "includeThoughts": True},
    }
    if config != wanted:
        problems.append(f"the first request asked for {config}")
    replayed = _model_turns(observation.requests[1])[0]
    expected = [  # the signed part exactly as it came; the unsigned rest of the text merged
        {"text": THOUGHT, "thought": True},
        {"text": "Fixing", SIGNATURE: SIGNATURE_VALUE},
        {"text": " add."},
        {"functionCall": {"name": "edit", "args": EDIT_FIX}},
    ]
    if _exact(replayed) != _exact(expected):
        problems.append(f"the thought and its signature were not replayed in place: {replayed}")
    return problems


CODE = "print(2 + 3)"


def _code_execution_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-code").code_execution(CODE, "5\n").text("Adds to 5.", 2)
    builder.call("edit", EDIT_FIX)
    return [builder.finish().turn(), _answer()]


def check_code_execution(observation: Observation) -> list[str]:
    replayed = _model_turns(observation.requests[1])[0]
    expected = [
        {"executableCode": {"language": "PYTHON", "code": CODE}},
        {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "5\n"}},
        {"text": "Adds to 5."},
        {"functionCall": {"name": "edit", "args": EDIT_FIX}},
    ]
    if _exact(replayed) != _exact(expected):
        return [f"the provider-executed parts were not replayed unchanged, in place: {replayed}"]
    return []


def _thought_call_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-thought-call").thought(THOUGHT, 2)
    part = builder.call_part("edit", EDIT_FIX)
    part["thought"] = True  # google-genai reports the call whatever the flag
    return [builder.chunk([part]).finish().turn(), _answer()]


def _text_and_call_part_turns() -> list[Turn]:
    builder = ChunkBuilder("gemini-text-and-call").text("Looking at it.", 2)
    part = builder.call_part("edit", EDIT_FIX)
    part["text"] = "Nothing to run here."  # google-genai reads the text and the call
    return [builder.chunk([part]).finish().turn()]


def _retry_delay_turns() -> list[Turn]:
    body = google_error(
        429,
        "You exceeded your current quota. Please retry in 7s.",
        [quota_failure(PER_MINUTE), retry_info(7)],
    )
    return [Turn(status=429, body=body), text_turn("gemini-after-429", "Answered after the wait.")]


def _daily_quota_turns() -> list[Turn]:
    body = google_error(
        429,
        "You exceeded your current quota, please check your plan and billing details.",
        [quota_failure(PER_DAY, "250"), quota_failure(PER_MINUTE), retry_info(40)],
    )
    return [Turn(status=429, body=body), text_turn("gemini-never", "No.")]


def _s(name: str, summary: str, expect: Expectation, turns: Any, **kw: Any) -> Scenario:
    return Scenario(f"gemini-{name}", summary, expect, turns, **kw)


_FIXED = finished(2, 1, fixed=True)

SCENARIOS: tuple[Scenario, ...] = own(
    "gemini",
    _s(
        "finish-separate-chunk",
        "text, a signed call with its server id, the finish in an empty-text chunk (3.x): "
        "the call runs and is replayed exactly",
        _FIXED,
        _edit_separate_finish_turns,
        check=check_separate_finish,
    ),
    _s(
        "call-with-finish",
        "a call and STOP in one chunk, no id, no candidate index (2.x): the call runs, the "
        "replay sends no invented id",
        _FIXED,
        _call_with_finish_turns,
        check=check_call_with_finish,
    ),
    _s(
        "late-signature",
        "a call, then its thoughtSignature on an empty text part in the finish chunk: "
        "replayed on the call",
        _FIXED,
        _late_signature_turns,
        check=check_late_signature,
    ),
    _s(
        "crlf-framing",
        "CRLF frames cut between CR and LF",
        answered(answer=CRLF_ANSWER),
        _crlf_turns,
    ),
    _s(
        "safety",
        "a complete call, then finishReason SAFETY: nothing runs",
        failure(FailureKind.RESPONSE_INCOMPLETE, closed_early=0),
        _safety_turns,
        check=stopped_with("SAFETY"),
    ),
    _s(
        "recitation",
        "text and a call, then a content-free chunk with finishReason RECITATION",
        failure(FailureKind.RESPONSE_INCOMPLETE, closed_early=0),
        _recitation_turns,
        check=stopped_with("RECITATION"),
    ),
    _s(
        "malformed-function-call",
        "finishReason MALFORMED_FUNCTION_CALL with its finishMessage, no call part",
        failure(FailureKind.INVALID_BATCH, closed_early=0),
        _malformed_call_turns,
        check=stopped_with("MALFORMED_FUNCTION_CALL"),
    ),
    _s(
        "malformed-after-parsed-call",
        "a call that parsed, then MALFORMED_FUNCTION_CALL: the parsed call does not run",
        failure(FailureKind.INVALID_BATCH, closed_early=0),
        _malformed_after_call_turns,
    ),
    _s(
        "max-tokens-with-call",
        "a whole call in the chunk that says MAX_TOKENS: nothing runs",
        failure(FailureKind.RESPONSE_INCOMPLETE, closed_early=0),
        _max_tokens_turns,
        check=stopped_with("MAX_TOKENS"),
    ),
    _s(
        "max-tokens-recover",
        "--recover: the call of a MAX_TOKENS response is answered by name, not run; reissued",
        finished(3, 1, fixed=True),
        _max_tokens_recover_turns,
        options=LabOptions(recovery_budget=2),
        check=check_max_tokens_recover,
    ),
    _s(
        "reset-before-finish",
        "a connection reset after the call, before the finish chunk",
        failure(FailureKind.TRANSPORT, closed_early=0),
        _reset_before_finish_turns,
    ),
    _s(
        "error-chunk",
        "an UNAVAILABLE error object as a chunk of the 200 stream, after text",
        failure(FailureKind.PROVIDER_ERROR, closed_early=0),
        _error_chunk_turns,
    ),
    _s(
        "error-retry-unstarted",
        "an INTERNAL error chunk before anything else, retry_unstarted on: retried, answered",
        answered(2, "Answered after the error."),
        _error_first_turns,
        options=LabOptions(retry_unstarted=True),
    ),
    _s(
        "blocked-prompt",
        "promptFeedback.blockReason PROHIBITED_CONTENT, no candidates",
        failure(FailureKind.RESPONSE_INCOMPLETE, closed_early=0),
        _blocked_prompt_turns,
        check=stopped_with("PROHIBITED_CONTENT"),
    ),
    _s(
        "calls-without-ids",
        "two calls in one chunk without ids: both run, answered by name in order, no id sent",
        finished(2, 2),
        _parallel_without_ids_turns,
        check=check_parallel_without_ids,
    ),
    _s(
        "second-candidate",
        "a candidate with index 1: lockgate asks for one",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        _second_candidate_turns,
    ),
    _s(
        "usage-running-total",
        "usageMetadata repeated as a running total, then a usage-only chunk after the "
        "finish: the last one counts, never the sum",
        answered(answer="Counted once."),
        _running_usage_turns,
        check=check_running_usage,
    ),
    _s(
        "content-after-finish",
        "finishReason STOP, then a call chunk: the finish never covered it",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        _content_after_finish_turns,
    ),
    _s(
        "spliced-response",
        "a chunk naming another responseId inside the stream",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        _spliced_turns,
    ),
    _s(
        "thinking-replay",
        "thinking budget 512: thought parts shown as reasoning, replayed in place with the "
        "signature on the first text part",
        _FIXED,
        _thinking_turns,
        options=LabOptions(provider_options=GeminiOptions(thinking_budget=THINKING_BUDGET)),
        check=check_thinking,
    ),
    _s(
        "code-execution",
        "executableCode and codeExecutionResult before a call: replayed, never executed",
        _FIXED,
        _code_execution_turns,
        check=check_code_execution,
    ),
    _s(
        "thought-call",
        "a functionCall in a part marked thought: read and judged as the call google-genai "
        "reports, run, answered",
        _FIXED,
        _thought_call_turns,
    ),
    _s(
        "text-and-call-part",
        "one part holding text and a functionCall (the API's Part holds one): refused, "
        "never read as text alone",
        failure(FailureKind.MALFORMED_EVENT),
        _text_and_call_part_turns,
    ),
    _s(
        "429-retry-delay",
        "429 RESOURCE_EXHAUSTED per minute with RetryInfo retryDelay 7s: retried after it",
        answered(2, "Answered after the wait."),
        _retry_delay_turns,
        check=waited(7.0),
    ),
    _s(
        "daily-quota",
        "429 RESOURCE_EXHAUSTED whose QuotaFailure names a daily quota: terminal",
        failure(FailureKind.QUOTA_EXHAUSTED, closed_early=0),
        _daily_quota_turns,
    ),
)
