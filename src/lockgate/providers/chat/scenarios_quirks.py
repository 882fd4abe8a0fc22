"""Chat Completions' own lab scenarios, first half: the quirks of compatible servers (Ollama,
Gemini, DeepSeek, Groq, vLLM, OpenRouter, Azure, Mistral, …), the shapes they really send.
Each says whether the gate accepts it or refuses it (when the official SDKs would misread
it). `scenarios.py` assembles these, then `scenarios_faults.py`'s."""

from __future__ import annotations

from ...errors import FailureKind
from ...scripted.renderer import Frame
from ...scripted.reply import (
    ReplyUsage,
    split,
)
from ...scripted.scenario import (
    EDIT_FIX,
    Observation,
    Scenario,
    answered,
    failure,
    finished,
)
from ...scripted.script import Turn
from .render import (
    DONE,
    ChunkBuilder,
    usage_object,
)
from .scenarios_kit import EDIT_JSON, READ_README, _edit, _s

_FIXED = finished(2, 1, fixed=True)
_TWO_TOOLS = finished(2, 2)
_DISCOVERED = finished(2, 1)


def _then_answer(*turns: Turn) -> list[Turn]:
    answer = ChunkBuilder("chatcmpl-answer").start().text("Fixed.").finish("stop")
    return [*turns, answer.turn()]


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


QUIRKS: tuple[Scenario, ...] = (
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
)
