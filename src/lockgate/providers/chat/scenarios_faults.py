"""Chat Completions' own lab scenarios, second half: the fail-closed side, the protocol's
own faults. A finish missing, changed or followed by more content, a cut body, an error
signal in the stream, a second choice, calls out of order or merged: none of these runs a
call. `scenarios.py` assembles these after `scenarios_quirks.py`'s."""

from __future__ import annotations

import json

from ...errors import FailureKind
from ...scripted.scenario import (
    Scenario,
    failure,
)
from ...scripted.script import Turn
from .render import ChunkBuilder
from .scenarios_kit import EDIT_JSON, READ_README, _edit, _s


def eof_before_finish_turns() -> list[Turn]:
    return [_edit().turn()]


def text_after_finish_turns() -> list[Turn]:
    # The finish moved before the last fragments: [DONE] does not cover them.
    builder = ChunkBuilder("chatcmpl-moved").start().text("Looking")
    builder.chunk({}, "stop").text(" further.").done()
    return [builder.turn()]


def call_after_finish_turns() -> list[Turn]:
    # Text with finish stop, then a complete call, then [DONE].
    builder = ChunkBuilder("chatcmpl-after").start().text("Looking.")
    builder.chunk({}, "stop").call(0, "call_1", "edit", EDIT_JSON).done()
    return [builder.turn()]


def spliced_retry_turns() -> list[Turn]:
    # A gateway splices a retried upstream attempt after the first attempt's finish: a read
    # call and its finish, then a new call at index 0 with a new id, another finish, [DONE].
    builder = ChunkBuilder("chatcmpl-spliced").start(None)
    builder.call(0, "call_1", "read", READ_README).chunk({}, "tool_calls")
    builder.call(0, "call_2", "edit", EDIT_JSON).finish("tool_calls")
    return [builder.turn()]


def cut_after_finish_turns() -> list[Turn]:
    # No [DONE]; the body ends cleanly, but inside a frame: the stream was cut.
    builder = _edit().finish("tool_calls", done=False)
    builder.events.append({"raw": 'data: {"id":"chatcmpl-edit","choices":[{"index":0,"de'})
    return [builder.turn()]


def second_choice_turns() -> list[Turn]:
    # Choice 0 opens (role, empty content) and never finishes; choice 2 carries a call.
    builder = ChunkBuilder("chatcmpl-n3").start("")
    call = {"index": 0, "id": "call_1", "type": "function"}
    call["function"] = {"name": "edit", "arguments": EDIT_JSON}
    builder.raw_chunk(
        {"choices": [{"index": 2, "delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]}
    )
    return [builder.done().turn()]


def calls_by_index_turns() -> list[Turn]:
    # The second call (index 1) begins before the first (index 0).
    builder = ChunkBuilder("chatcmpl-order").start(None)
    builder.call(1, "call_b", "read", READ_README).call(0, "call_a", "discover", "{}")
    return [builder.finish("tool_calls").turn()]


def done_without_finish_turns() -> list[Turn]:
    builder = _edit()
    builder.done()
    return [builder.turn()]


def tool_calls_without_call_turns() -> list[Turn]:
    return [ChunkBuilder("chatcmpl-x").start().text("Nothing to call.").finish("tool_calls").turn()]


def cut_arguments_turns() -> list[Turn]:
    builder = (
        ChunkBuilder("chatcmpl-vllm-cut").start(None).call(0, "call_1", "edit", EDIT_JSON, cut=True)
    )
    return [builder.finish("tool_calls").turn()]


def content_filter_turns() -> list[Turn]:
    return [_edit().finish("content_filter").turn()]


def finish_error_turns() -> list[Turn]:
    return [_edit().finish("error").turn()]


def error_payload_turns() -> list[Turn]:
    builder = (
        ChunkBuilder("chatcmpl-err").start(None).call(0, "call_1", "edit", EDIT_JSON, cut=True)
    )
    builder.events.append(
        {
            "error": {
                "message": "The server had an error.",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        }
    )
    return [builder.turn()]


def choice_error_turns() -> list[Turn]:
    builder = ChunkBuilder("chatcmpl-choice-err").start(None).call(0, "call_1", "edit", EDIT_JSON)
    builder.raw_chunk(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {},
                    "finish_reason": "error",
                    "error": {"message": "upstream failed", "code": 502},
                }
            ]
        }
    )
    builder.done()
    return [builder.turn()]


def groq_event_error_turns() -> list[Turn]:
    builder = ChunkBuilder("chatcmpl-groq-err").start(None)
    builder.events.append(
        {
            "sse_event": "error",
            "error": {
                "message": "Failed to call a function.",
                "type": "invalid_request_error",
                "code": "tool_use_failed",
            },
        }
    )
    return [builder.turn()]


def error_after_finish_turns() -> list[Turn]:
    builder = _edit(ChunkBuilder("chatcmpl-openrouter-err"))
    builder.chunk({}, "tool_calls")
    builder.raw_chunk(
        {
            "choices": [{"index": 0, "delta": {}, "finish_reason": None}],
            "error": {"code": 400, "message": "Token limit reached"},
        }
    )
    builder.done()
    return [builder.turn()]


def two_choices_turns() -> list[Turn]:
    builder = ChunkBuilder("chatcmpl-n2").start(None).call(0, "call_1", "edit", EDIT_JSON)
    builder.raw_chunk(
        {"choices": [{"index": 1, "delta": {"content": "another answer"}, "finish_reason": None}]}
    )
    return [builder.finish("tool_calls").turn()]


def conflicting_finish_turns() -> list[Turn]:
    builder = _edit().chunk({}, "length")
    return [builder.finish("tool_calls").turn()]


def merged_parallel_turns() -> list[Turn]:
    # Two calls to the same tool at index 0 without ids: indistinguishable, so their
    # arguments run together and the batch fails closed.
    builder = ChunkBuilder("chatcmpl-old-ollama").start(None)
    for arguments in (READ_README, json.dumps({"path": "calculator.py"})):
        builder.chunk(
            {"tool_calls": [{"index": 0, "function": {"name": "read", "arguments": arguments}}]}
        )
    return [builder.finish("tool_calls").turn()]


FAULTS: tuple[Scenario, ...] = (
    _s(
        "eof-before-finish",
        "the body ends before any finish_reason",
        failure(FailureKind.STREAM_ENDED, closed_early=0),
        eof_before_finish_turns,
    ),
    _s(
        "text-after-finish",
        "the finish, then more text, then [DONE]: the finish never covered that text",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        text_after_finish_turns,
    ),
    _s(
        "call-after-finish",
        "text with finish stop, then a complete call, then [DONE]: the call does not run",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        call_after_finish_turns,
    ),
    _s(
        "spliced-retry",
        "a call and its finish, then a new call at index 0 with its own finish (a gateway "
        "splicing a retried attempt): neither runs",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        spliced_retry_turns,
    ),
    _s(
        "cut-after-finish",
        "the finish, no [DONE], and the body ends inside a frame: a cut, not a clean end",
        failure(FailureKind.STREAM_ENDED, closed_early=0),
        cut_after_finish_turns,
    ),
    _s(
        "done-without-finish",
        "[DONE] with no finish_reason at all (Snowflake, LM Studio)",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        done_without_finish_turns,
    ),
    _s(
        "tool-calls-without-call",
        "finish_reason tool_calls but no call",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        tool_calls_without_call_turns,
    ),
    _s(
        "cut-arguments",
        "finish tool_calls on a call cut off by the token limit (vLLM): the batch fails",
        failure(FailureKind.INVALID_BATCH, closed_early=0),
        cut_arguments_turns,
    ),
    _s(
        "content-filter",
        "finish_reason content_filter",
        failure(FailureKind.RESPONSE_INCOMPLETE, closed_early=0),
        content_filter_turns,
    ),
    _s(
        "finish-error",
        "finish_reason error",
        failure(FailureKind.PROVIDER_ERROR, closed_early=0),
        finish_error_turns,
    ),
    _s(
        "error-payload",
        'an {"error": …} payload inside the 200 stream (OpenAI)',
        failure(FailureKind.PROVIDER_ERROR, closed_early=0),
        error_payload_turns,
    ),
    _s(
        "choice-error",
        "choices[0].error with finish_reason error (OpenRouter)",
        failure(FailureKind.PROVIDER_ERROR, closed_early=0),
        choice_error_turns,
    ),
    _s(
        "event-error",
        "an `event: error` frame in the data-only stream (Groq)",
        failure(FailureKind.PROVIDER_ERROR, closed_early=0),
        groq_event_error_turns,
    ),
    _s(
        "error-after-finish",
        "an error chunk after the finish, then [DONE] (OpenRouter)",
        failure(FailureKind.PROVIDER_ERROR, closed_early=0),
        error_after_finish_turns,
    ),
    _s(
        "two-choices",
        "two choice indexes carry content",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        two_choices_turns,
    ),
    _s(
        "second-choice",
        "choice 0 opens and never finishes while choice 2 carries a call and a finish",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        second_choice_turns,
    ),
    _s(
        "calls-by-index",
        "the call at index 1 begins before the call at index 0: openai-python cannot read "
        "it, refused",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        calls_by_index_turns,
    ),
    _s(
        "conflicting-finish",
        "finish length, then tool_calls",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        conflicting_finish_turns,
    ),
    _s(
        "merged-parallel",
        "two calls to one tool at index 0 without ids: indistinguishable, the batch fails",
        failure(FailureKind.INVALID_BATCH, closed_early=0),
        merged_parallel_turns,
    ),
)
