"""Chat Completions provider's own lab scenarios: the rules and quirks only this protocol has,
beside the neutral scenarios every protocol runs (`lockgate.lab.scenarios`)."""

from __future__ import annotations

import json
from typing import Any

from ...errors import FailureKind
from ...scripted.renderer import Frame
from ...scripted.reply import (
    ReplyUsage,
    split,
)
from ...scripted.scenario import (
    EDIT_FIX,
    Expectation,
    Observation,
    Scenario,
    answered,
    failure,
    finished,
    own,
)
from ...scripted.script import Turn
from .render import (
    DONE,
    ChatRenderer,
    ChunkBuilder,
    render,
    usage_object,
)

# --- Chat's own scenarios: the quirks of compatible servers --------------------------------

EDIT_JSON = json.dumps(EDIT_FIX)
READ_README = json.dumps({"path": "README.md"})
_FIXED = finished(2, 1, fixed=True)
_TWO_TOOLS = finished(2, 2)
_DISCOVERED = finished(2, 1)


def _then_answer(*turns: Turn) -> list[Turn]:
    answer = ChunkBuilder("chatcmpl-answer").start().text("Fixed.").finish("stop")
    return [*turns, answer.turn()]


def _edit(builder: ChunkBuilder | None = None) -> ChunkBuilder:
    builder = builder or ChunkBuilder("chatcmpl-edit")
    return builder.start(None).call(0, "call_1", "edit", EDIT_JSON)


def no_done_turns() -> list[Turn]:
    return _then_answer(_edit().finish("tool_calls", done=False).turn())


def stop_with_calls_turns() -> list[Turn]:
    return _then_answer(_edit().finish("stop").turn())


def parallel_index_zero_turns() -> list[Turn]:
    # Ollama 0.20 (and LiteLLM's ollama_chat): every call at index 0, told apart by ids.
    # openai-python, openai-node and litellm read one call with both arguments run together.
    builder = ChunkBuilder("chatcmpl-ollama").start(None)
    builder.call(0, "call_a", "discover", "{}").call(0, "call_b", "read", READ_README)
    return [builder.finish("tool_calls").turn()]


def null_index_turns() -> list[Turn]:
    # The last argument fragment says `index: null`: openai-node and the AI SDK drop it and
    # read the arguments cut short.
    builder = ChunkBuilder("chatcmpl-null-index").start(None)
    half = len(READ_README) // 2
    builder.call(0, "call_1", "read", READ_README[:half])
    builder.chunk({"tool_calls": [{"index": None, "function": {"arguments": READ_README[half:]}}]})
    return [builder.finish("tool_calls").turn()]


def repeated_ids_names_turns() -> list[Turn]:
    builder = ChunkBuilder("chatcmpl-deepseek").start(None)
    for piece in split(EDIT_JSON, 4):
        fragment = {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "edit", "arguments": piece},
        }
        builder.chunk({"tool_calls": [fragment]})
    return _then_answer(builder.finish("tool_calls").turn())


def missing_ids_turns() -> list[Turn]:
    builder = ChunkBuilder("chatcmpl-gemini").start(None)
    builder.chunk(
        {
            "tool_calls": [
                {"id": "", "type": "function", "function": {"name": "edit", "arguments": EDIT_JSON}}
            ]
        },
        "stop",
    )
    builder.raw_chunk({"choices": [], "usage": usage_object(ReplyUsage())}).events.append(DONE)
    return _then_answer(builder.turn())


def check_synthesized_id(observation: Observation) -> list[str]:
    messages = list(observation.requests[1].get("messages", []))
    assistant = [m for m in messages if m.get("role") == "assistant" and m.get("tool_calls")]
    if not assistant:
        return ["the call was not replayed"]
    call_id = assistant[0]["tool_calls"][0].get("id")
    if not call_id:
        return ["the replayed call has no id"]
    if observation.protocol.tool_result(observation.requests[1], call_id) is None:
        return [f"no tool message answers the synthesized id {call_id!r}"]
    return []


def no_index_turns() -> list[Turn]:
    builder = ChunkBuilder("chatcmpl-mistral").start(None)
    builder.chunk(
        {
            "tool_calls": [
                {"id": "aB3dE5gH7", "function": {"name": "discover", "arguments": "{}"}},
                {"id": "zY9xW7vU5", "function": {"name": "read", "arguments": READ_README}},
            ]
        }
    )
    return _then_answer(builder.finish("tool_calls").turn())


def whole_call_with_finish_turns() -> list[Turn]:
    builder = ChunkBuilder("chatcmpl-groq").start(None)
    fragment = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "edit", "arguments": EDIT_JSON},
    }
    builder.chunk({"tool_calls": [fragment]}, "tool_calls").events.append(DONE)
    return _then_answer(builder.turn())


def arguments_object_turns() -> list[Turn]:
    builder = ChunkBuilder("chatcmpl-llamacpp").start(None)
    fragment = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "edit", "arguments": EDIT_FIX},
    }
    builder.chunk({"tool_calls": [fragment]})
    return _then_answer(builder.finish("tool_calls").turn())


def null_arguments_turns() -> list[Turn]:
    builder = ChunkBuilder("chatcmpl-vllm").start(None)
    builder.chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "discover", "arguments": None},
                }
            ]
        }
    )
    return [
        builder.finish("tool_calls").turn(),
        ChunkBuilder("chatcmpl-2").start().text("Done.").finish("stop").turn(),
    ]


def name_after_arguments_turns() -> list[Turn]:
    builder = ChunkBuilder("chatcmpl-late-name").start(None)
    half = len(EDIT_JSON) // 2
    builder.chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_1",
                    "function": {"name": "", "arguments": EDIT_JSON[:half]},
                }
            ]
        }
    )
    builder.chunk(
        {"tool_calls": [{"index": 0, "function": {"name": "edit", "arguments": EDIT_JSON[half:]}}]}
    )
    return _then_answer(builder.finish("tool_calls").turn())


def index_gap_turns() -> list[Turn]:
    builder = ChunkBuilder("chatcmpl-sglang").start(None)
    builder.call(3, "call_a", "discover", "{}").call(7, "call_b", "read", READ_README)
    return [builder.finish("tool_calls").turn()]


def multiple_finish_turns() -> list[Turn]:
    builder = _edit(ChunkBuilder("chatcmpl-openrouter"))
    builder.chunk({}, "tool_calls").chunk({}, "tool_calls", usage=usage_object(ReplyUsage()))
    builder.raw_chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": None}]})
    builder.done()
    return _then_answer(builder.turn())


def envelope_noise_turns() -> list[Turn]:
    builder = ChunkBuilder("chatcmpl-azure")
    builder.events.append(
        {
            "id": "",
            "object": "",
            "created": 0,
            "model": "",
            "choices": [],
            "prompt_filter_results": [{"prompt_index": 0}],
        }
    )
    builder.start(None)
    builder.events.append({"raw": ": OPENROUTER PROCESSING\n\n"})
    builder.raw_chunk(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "edit", "arguments": ""},
                            }
                        ]
                    },
                    "finish_reason": None,
                }
            ],
            "usage": None,
            "obfuscation": "x1y2",
            "p": "abcdefgh",
        }
    )
    for piece in split(EDIT_JSON, 3):
        builder.raw_chunk(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]},
                    }
                ],
                "p": "abc",
            }
        )
    builder.raw_chunk(
        {"choices": [{"index": 0, "finish_reason": None, "content_filter_results": {}}]}
    )
    return _then_answer(builder.finish("tool_calls").turn())


def choice_index_one_turns() -> list[Turn]:
    builder = ChunkBuilder("chatcmpl-writer")
    for piece in ("The bug ", "is in add."):
        builder.raw_chunk(
            {"choices": [{"index": 1, "delta": {"content": piece}, "finish_reason": None}]}
        )
    builder.raw_chunk({"choices": [{"index": 1, "delta": {}, "finish_reason": "stop"}]})
    return [builder.turn()]


def groq_usage_turns() -> list[Turn]:
    builder = ChunkBuilder("chatcmpl-groq-usage").start().text("Counted.")
    usage = {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107}
    builder.chunk({}, "stop", x_groq={"id": "req_1", "usage": usage}).events.append(DONE)
    return [builder.turn()]


def check_groq_usage(observation: Observation) -> list[str]:
    usage = observation.usage
    if usage is None or (usage.input_tokens, usage.output_tokens, usage.total_tokens) != (
        100,
        7,
        107,
    ):
        return [f"usage {usage}, expected input=100 output=7 total=107 from x_groq.usage"]
    return []


def reasoning_content_turns() -> list[Turn]:
    builder = ChunkBuilder("chatcmpl-deepseek-think", "deepseek-reasoner").start(None)
    for piece in ("Look at ", "the files."):
        builder.chunk({"reasoning_content": piece})
    builder.call(0, "call_1", "discover", "{}")
    answer = (
        ChunkBuilder("chatcmpl-deepseek-2", "deepseek-reasoner")
        .start()
        .text("Done.")
        .finish("stop")
    )
    return [builder.finish("tool_calls").turn(), answer.turn()]


def check_reasoning_content(observation: Observation) -> list[str]:
    messages = list(observation.requests[1].get("messages", []))
    assistant = [m for m in messages if m.get("role") == "assistant"]
    if not assistant or assistant[0].get("reasoning_content") != "Look at the files.":
        return ["the assistant turn that made calls did not carry its reasoning_content back"]
    return []


def reasoning_details_turns() -> list[Turn]:
    """OpenRouter (Anthropic upstream): reasoning.text pieces at index 0, then the entry
    that carries the signature; the merged list goes back unchanged with the call."""
    builder = ChunkBuilder("gen-openrouter-think", "anthropic/claude-sonnet").start(None)
    for piece in ("Read the ", "README first."):
        detail = {"type": "reasoning.text", "text": piece, "index": 0, "format": "anthropic"}
        builder.chunk({"reasoning": piece, "reasoning_details": [detail]})
    signed = {"type": "reasoning.text", "signature": "sig-opaque==", "index": 0}
    builder.chunk({"reasoning_details": [signed]})
    builder.call(0, "call_1", "discover", "{}")
    answer = ChunkBuilder("gen-openrouter-2", "anthropic/claude-sonnet").start()
    return [builder.finish("tool_calls").turn(), answer.text("Done.").finish("stop").turn()]


def check_reasoning_details(observation: Observation) -> list[str]:
    messages = list(observation.requests[1].get("messages", []))
    assistant = [m for m in messages if m.get("role") == "assistant"]
    wanted = [
        {
            "type": "reasoning.text",
            "text": "Read the README first.",
            "index": 0,
            "format": "anthropic",
            "signature": "sig-opaque==",
        }
    ]
    if not assistant or assistant[0].get("reasoning_details") != wanted:
        got = assistant[0].get("reasoning_details") if assistant else None
        return [f"reasoning_details were not replayed merged and unchanged: {got!r}"]
    return []


def typed_content_turns() -> list[Turn]:
    """Mistral: `content` as a list of typed parts, thinking and text in one chunk."""
    builder = ChunkBuilder("mistral-typed", "magistral-medium").start()
    thinking = {"type": "thinking", "thinking": [{"type": "text", "text": "The tests say 5."}]}
    builder.chunk({"content": [thinking, {"type": "text", "text": "The bug "}]})
    builder.chunk({"content": [{"type": "text", "text": "is in add."}]})
    return [builder.finish("stop").turn()]


def fresh_chunk_ids_turns() -> list[Turn]:
    """A proxy that sends a fresh id on every chunk: the id is no safety signal."""
    builder = _edit(ChunkBuilder("chatcmpl-proxy-0")).finish("tool_calls")
    frames: list[Frame] = []
    for number, frame in enumerate(builder.events):
        if "raw" in frame:
            frames.append(frame)
        else:
            frames.append({**frame, "id": f"chatcmpl-proxy-{number}"})
    return _then_answer(Turn(events=tuple(frames)))


# fail-closed side


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


def _s(name: str, summary: str, expect: Expectation, turns: Any, **kw: Any) -> Scenario:
    return Scenario(f"chat-{name}", summary, expect, turns, **kw)


SCENARIOS: tuple[Scenario, ...] = own(
    "chat",
    _s(
        "no-done",
        "finish, then the body ends without [DONE] (Writer, GPUStack): accepted",
        _FIXED,
        no_done_turns,
    ),
    _s(
        "stop-with-calls",
        "finish_reason stop with a call (named tool_choice, Gemini, Ollama): the call runs",
        _FIXED,
        stop_with_calls_turns,
    ),
    _s(
        "parallel-index-zero",
        "two calls both at index 0, told apart by new ids (Ollama): the SDKs read one "
        "merged call, refused",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        parallel_index_zero_turns,
    ),
    _s(
        "null-index",
        "an argument fragment with index null after indexed ones: openai-node and the AI SDK "
        "drop it, refused",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        null_index_turns,
    ),
    _s(
        "repeated-ids-names",
        "id and name repeated on every fragment (DeepSeek, sglang): set, not concatenated",
        _FIXED,
        repeated_ids_names_turns,
    ),
    _s(
        "missing-ids",
        'calls with id "" and no index (Gemini): a stable synthesized id, replayed',
        _FIXED,
        missing_ids_turns,
        check=check_synthesized_id,
    ),
    _s(
        "no-index",
        "two calls in one delta without index, each with an id (Mistral): both run",
        _TWO_TOOLS,
        no_index_turns,
    ),
    _s(
        "whole-call-one-chunk",
        "a whole call and the finish in one chunk (Groq, Ollama, xAI): the call runs",
        _FIXED,
        whole_call_with_finish_turns,
    ),
    _s(
        "arguments-object",
        "arguments sent as a JSON object (llama.cpp): serialized once, the call runs",
        _FIXED,
        arguments_object_turns,
    ),
    _s(
        "null-arguments",
        "arguments null for a tool without parameters (vLLM, Qwen3): {}",
        _DISCOVERED,
        null_arguments_turns,
    ),
    _s(
        "name-after-arguments",
        "the name arrives after the first arguments: the call runs",
        _FIXED,
        name_after_arguments_turns,
    ),
    _s(
        "index-gap",
        "call indexes 3 and 7 (sglang): the official SDKs cannot read them, refused",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        index_gap_turns,
    ),
    _s(
        "multiple-finish",
        "the finish twice, then a null finish (OpenRouter): idempotent",
        _FIXED,
        multiple_finish_turns,
    ),
    _s(
        "envelope-noise",
        "Azure's empty first chunk, comments, usage null, obfuscation, p, a choice without "
        "delta: tolerated",
        _FIXED,
        envelope_noise_turns,
    ),
    _s(
        "choice-index-one",
        "the single choice at index 1 (Writer): accepted",
        answered(1, answer="The bug is in add."),
        choice_index_one_turns,
    ),
    _s(
        "groq-usage",
        "usage only in x_groq.usage: counted",
        answered(1),
        groq_usage_turns,
        check=check_groq_usage,
    ),
    _s(
        "reasoning-content-replay",
        "reasoning_content on a turn that made calls goes back to the same producer (DeepSeek)",
        _DISCOVERED,
        reasoning_content_turns,
        check=check_reasoning_content,
    ),
    _s(
        "reasoning-details-replay",
        "reasoning_details pieces and their signature (OpenRouter): merged, replayed unchanged",
        _DISCOVERED,
        reasoning_details_turns,
        check=check_reasoning_details,
    ),
    _s(
        "typed-content-parts",
        "content as typed parts, thinking beside text (Mistral): the text parts are the answer",
        answered(1, answer="The bug is in add."),
        typed_content_turns,
    ),
    _s(
        "fresh-chunk-ids",
        "a fresh id on every chunk (proxies): not a safety signal, the call runs",
        _FIXED,
        fresh_chunk_ids_turns,
    ),
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

__all__ = ["SCENARIOS", "ChatRenderer", "ChunkBuilder", "render"]
