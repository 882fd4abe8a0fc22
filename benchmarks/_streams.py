"""The streams every benchmark uses, rendered by the lab's own protocol renderers, so that
each client (lockgate, the floors, the SDKs' typed paths, a naive client) reads exactly
the same native bytes.

A stream is named by a spec string, `<protocol>.<shape>.<text deltas>.<argument deltas>.
<rate>.<gap µs>[.openai]`: `text deltas` 4-character answer-text deltas, then (when
`argument deltas` > 0) one `edit` call whose argument JSON arrives in `argument deltas`
8-character pieces, then
the protocol's terminal success. `shape` is how the server sends it (`_server.py`). A
`bedrock` stream is ConverseStream's binary event stream (`application/vnd.amazon.eventstream`,
the lab renderer's messages: `messageStart`, the deltas, `messageStop`, `metadata`).

The `openai` style (Chat and Responses only) is what OpenAI's API sends, shaped after the
recordings of `../shared/real-streams` (generated here, never copied from them): Chat's
role chunk first (`"role":"assistant","content":"","refusal":null`), every chunk with its
`id`, `created`, `model`, `service_tier`, `system_fingerprint`, `logprobs: null`,
`usage: null` and an `obfuscation` pad of varying length, deltas of 1 to 8 characters
(median 4, as recorded: words, spaces, punctuation, now and then a newline or a quote to
escape), the finish chunk, the `usage` chunk with `choices: []`, `[DONE]`; Responses'
`response.created` / `response.in_progress` carrying the whole response object, the item and
part events, `output_text.delta` with `logprobs: []` and `obfuscation`, `sequence_number`
on every event, the `*.done` events repeating the text, and `response.completed` with the
output and the usage.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from lockgate.providers import PROVIDERS
from lockgate.scripted.reply import Call, Part, Reply, Say

PROTOCOLS = ("responses", "chat", "anthropic", "bedrock")  # bedrock: the binary event stream
SHAPES = ("chunks", "bulk", "paced", "tiny", "json")  # json: a whole (non-streaming) answer
STYLES = ("lab", "openai")  # the lab renderer's frames, or OpenAI's own shape
PLACEHOLDER = b"@" * 18  # a text delta the paced server replaces with its send time
TEXT_PIECE = 4
ARGUMENT_PIECE = 8


@dataclass(frozen=True, slots=True)
class StreamSpec:
    protocol: str
    shape: str
    text: int = 1500
    arguments: int = 500
    rate: int = 50  # paced: events per second
    gap_us: int = 0  # chunks: the server sleeps this long after each event (one read each)
    style: str = "lab"

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS or self.shape not in SHAPES or self.style not in STYLES:
            raise ValueError(f"bad stream spec {self}")
        if self.style == "openai" and self.protocol == "anthropic":
            raise ValueError(f"no OpenAI style for {self.protocol}")

    @property
    def name(self) -> str:
        if self.shape == "tiny":
            return f"{self.protocol}.tiny"
        name = (
            f"{self.protocol}.{self.shape}.{self.text}.{self.arguments}.{self.rate}.{self.gap_us}"
        )
        return name if self.style == "lab" else f"{name}.{self.style}"


def parse_spec(text: str) -> StreamSpec:
    parts = text.split(".")
    if len(parts) == 2:
        return StreamSpec(parts[0], parts[1])
    style = parts.pop() if len(parts) == 7 else "lab"
    protocol, shape, deltas, arguments, rate, gap = parts
    return StreamSpec(protocol, shape, int(deltas), int(arguments), int(rate), int(gap), style)


def edit_arguments(length: int) -> str:
    """Edit-call arguments of exactly `length` characters (a JSON object)."""
    skeleton = json.dumps({"path": "calculator.py", "old": "", "new": "return a + b"})
    filler = "x" * max(0, length - len(skeleton))
    text = json.dumps({"path": "calculator.py", "old": filler, "new": "return a + b"})
    assert len(text) == max(length, len(skeleton))
    return text


def reply(spec: StreamSpec) -> Reply:
    if spec.shape == "tiny":
        return Reply("resp_tiny", (Say("Done.", 2),))
    parts: list[Part] = []
    if spec.text:
        if spec.shape == "paced":
            text = PLACEHOLDER.decode() * spec.text
            parts.append(Say(text, spec.text))
        else:
            text = "".join(f"w{i % 10}x " for i in range(spec.text))
            parts.append(Say(text, spec.text))
    if spec.arguments:
        arguments = edit_arguments(spec.arguments * ARGUMENT_PIECE)
        parts.append(Call("call_bench_1", "edit", arguments, pieces=spec.arguments))
    return Reply("resp_bench", tuple(parts))


def whole_body(spec: StreamSpec) -> bytes:
    """A whole Chat Completions answer (`"stream": false`) as OpenAI sends it: `text`
    words of text, its usage, `service_tier`, `system_fingerprint`."""
    rng = random.Random(spec.name)
    text = "".join(text_pieces(spec.text, rng))
    tokens = spec.text
    body = {
        "id": "chatcmpl-" + "".join(rng.choice(_PAD) for _ in range(29)),
        "object": "chat.completion",
        "created": 1767625745,
        "model": MODEL_NAME,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": [],
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 412,
            "completion_tokens": tokens,
            "total_tokens": 412 + tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }
    return _dumps(body).encode()


def stream_frames(spec: StreamSpec) -> list[bytes]:
    """The native frames of the spec's stream, one per event (SSE frames; Bedrock's: binary
    event-stream messages, as ConverseStream sends them)."""
    if spec.style == "openai":
        return openai_frames(spec)
    lab = PROVIDERS[spec.protocol].render()
    frames = [lab.frame(event) for event in lab.events(reply(spec))]
    if spec.protocol == "chat" and frames[-1] != b"data: [DONE]\n\n":
        frames.append(b"data: [DONE]\n\n")  # as OpenAI ends a Chat stream
    return frames


def stream_body(spec: StreamSpec) -> bytes:
    return b"".join(stream_frames(spec))


# --- OpenAI's own shape ------------------------------------------------------------------

_WORDS = (
    "the", "a", "function", "returns", "value", "of", "to", "in", "file", "test", "and",
    "calculator", "is", "bug", "fix", "we", "it", "that", "add", "sum", "should", "line",
)  # fmt: skip
_PAD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
MODEL_NAME = "gpt-4.1-mini-2025-04-14"
FINGERPRINT = "fp_6f2eabb9a5"


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def text_pieces(count: int, rng: random.Random) -> list[str]:
    """`count` deltas of model-like text: words with their leading space, punctuation,
    now and then a newline or a quoted word (something to escape), 1 to 8 characters."""
    pieces: list[str] = []
    while len(pieces) < count:
        roll = rng.random()
        if roll < 0.06:
            pieces.append(rng.choice((".", ",", ":")))
        elif roll < 0.08:
            pieces.append(".\n\n" if rng.random() < 0.5 else "\n")
        elif roll < 0.09:
            pieces.append(' "' + rng.choice(_WORDS)[:5] + '"')
        else:
            word = rng.choice(_WORDS)
            pieces.append(" " + word[:7])
    return pieces


def split_pieces(text: str, count: int, rng: random.Random) -> list[str]:
    """`text` cut into `count` non-empty pieces of 1 to 8 characters where it can be."""
    count = max(1, min(count, len(text)))
    cuts = sorted(rng.sample(range(1, len(text)), count - 1)) if count > 1 else []
    bounds = [0, *cuts, len(text)]
    return [text[bounds[i] : bounds[i + 1]] for i in range(count)]


def _pad(rng: random.Random, text: str) -> str:
    """The `obfuscation` field: random characters that even out the event's length."""
    return "".join(rng.choice(_PAD) for _ in range(max(1, 16 - len(text) + rng.randint(-3, 2))))


def _hex(rng: random.Random, length: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(length))


def _call_arguments(spec: StreamSpec, rng: random.Random) -> list[str]:
    sizes = [rng.randint(1, 7) for _ in range(spec.arguments)]
    text = edit_arguments(sum(sizes))
    return split_pieces(text, spec.arguments, rng)


def _texts(spec: StreamSpec, rng: random.Random) -> list[str]:
    if spec.shape == "paced":
        return [PLACEHOLDER.decode()] * spec.text
    return text_pieces(spec.text, rng)


def openai_frames(spec: StreamSpec) -> list[bytes]:
    rng = random.Random(f"{spec.name}")  # the same bytes for the same spec, every run
    if spec.protocol == "chat":
        return _chat_frames(spec, rng)
    return _responses_frames(spec, rng)


def _chat_frames(spec: StreamSpec, rng: random.Random) -> list[bytes]:
    head = {
        "id": "chatcmpl-" + "".join(rng.choice(_PAD) for _ in range(29)),
        "object": "chat.completion.chunk",
        "created": 1767625745,
        "model": MODEL_NAME,
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }

    def chunk(delta: dict[str, object], finish: str | None = None, pad: str = "") -> bytes:
        body = {
            **head,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            "usage": None,
            "obfuscation": _pad(rng, pad),
        }
        return b"data: " + _dumps(body).encode() + b"\n\n"

    texts = _texts(spec, rng)
    arguments = _call_arguments(spec, rng) if spec.arguments else []
    frames: list[bytes] = []
    if texts or not arguments:
        frames.append(chunk({"role": "assistant", "content": "", "refusal": None}))
    frames.extend(chunk({"content": text}, pad=text) for text in texts)
    if arguments:
        opening: dict[str, object] = {} if texts else {"role": "assistant", "content": None}
        call = {
            "index": 0,
            "id": "call_" + "".join(rng.choice(_PAD) for _ in range(24)),
            "type": "function",
            "function": {"name": "edit", "arguments": ""},
        }
        frames.append(chunk({**opening, "tool_calls": [call], "refusal": None}))
        frames.extend(
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}, pad=piece)
            for piece in arguments
        )
    frames.append(chunk({}, "tool_calls" if arguments else "stop"))
    completion = len(texts) + len(arguments) + 1
    usage = {
        **head,
        "choices": [],
        "usage": {
            "prompt_tokens": 412,
            "completion_tokens": completion,
            "total_tokens": 412 + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "obfuscation": _pad(rng, ""),
    }
    frames.append(b"data: " + _dumps(usage).encode() + b"\n\n")
    frames.append(b"data: [DONE]\n\n")
    return frames


def _responses_frames(spec: StreamSpec, rng: random.Random) -> list[bytes]:
    response_id = "resp_" + _hex(rng, 50)
    message_id = "msg_" + _hex(rng, 50)
    call_item_id = "fc_" + _hex(rng, 50)
    call_id = "call_" + "".join(rng.choice(_PAD) for _ in range(24))
    texts = _texts(spec, rng)
    arguments = _call_arguments(spec, rng) if spec.arguments else []
    sequence = 0
    frames: list[bytes] = []

    def event(body: dict[str, object]) -> None:
        nonlocal sequence
        body["sequence_number"] = sequence
        sequence += 1
        frames.append(f"event: {body['type']}\ndata: {_dumps(body)}\n\n".encode())

    def response(status: str, output: list[object], usage: object) -> dict[str, object]:
        return {
            "id": response_id,
            "object": "response",
            "created_at": 1778037182,
            "status": status,
            "background": False,
            "completed_at": 1778037190 if status == "completed" else None,
            "error": None,
            "frequency_penalty": 0.0,
            "incomplete_details": None,
            "instructions": None,
            "max_output_tokens": None,
            "max_tool_calls": None,
            "model": MODEL_NAME,
            "output": output,
            "parallel_tool_calls": True,
            "presence_penalty": 0.0,
            "previous_response_id": None,
            "prompt_cache_key": None,
            "prompt_cache_retention": None,
            "reasoning": {"effort": None, "summary": None},
            "safety_identifier": None,
            "service_tier": "default",
            "store": False,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": "auto",
            "tools": [],
            "top_logprobs": 0,
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": usage,
            "user": None,
            "metadata": {},
        }

    event({"type": "response.created", "response": response("in_progress", [], None)})
    event({"type": "response.in_progress", "response": response("in_progress", [], None)})
    output: list[object] = []
    index = 0
    if texts:
        text = "".join(texts)
        part: dict[str, object] = {"type": "output_text", "annotations": [], "logprobs": []}
        item = {"id": message_id, "type": "message", "status": "in_progress", "role": "assistant"}
        event({"type": "response.output_item.added", "item": {**item, "content": []},
               "output_index": index})  # fmt: skip
        event({"type": "response.content_part.added", "content_index": 0, "item_id": message_id,
               "output_index": index, "part": {**part, "text": ""}})  # fmt: skip
        for piece in texts:
            event({"type": "response.output_text.delta", "content_index": 0, "delta": piece,
                   "item_id": message_id, "logprobs": [], "obfuscation": _pad(rng, piece),
                   "output_index": index})  # fmt: skip
        event({"type": "response.output_text.done", "content_index": 0, "item_id": message_id,
               "logprobs": [], "output_index": index, "text": text})  # fmt: skip
        event({"type": "response.content_part.done", "content_index": 0, "item_id": message_id,
               "output_index": index, "part": {**part, "text": text}})  # fmt: skip
        done = {**item, "status": "completed", "content": [{**part, "text": text}]}
        event({"type": "response.output_item.done", "item": done, "output_index": index})
        output.append(done)
        index += 1
    if arguments:
        whole = "".join(arguments)
        call = {"id": call_item_id, "type": "function_call", "status": "in_progress",
                "arguments": "", "call_id": call_id, "name": "edit"}  # fmt: skip
        event({"type": "response.output_item.added", "item": call, "output_index": index})
        for piece in arguments:
            event({"type": "response.function_call_arguments.delta", "delta": piece,
                   "item_id": call_item_id, "obfuscation": _pad(rng, piece),
                   "output_index": index})  # fmt: skip
        event({"type": "response.function_call_arguments.done", "arguments": whole,
               "item_id": call_item_id, "output_index": index})  # fmt: skip
        done = {**call, "status": "completed", "arguments": whole}
        event({"type": "response.output_item.done", "item": done, "output_index": index})
        output.append(done)
    tokens = len(texts) + len(arguments)
    usage = {
        "input_tokens": 412,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 412 + tokens,
    }
    event({"type": "response.completed", "response": response("completed", output, usage)})
    return frames
