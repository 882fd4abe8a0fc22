"""What lockgate guesses from an OpenAI model name (shared by the Responses and Chat codecs)."""

from __future__ import annotations

REASONING_MODEL_PREFIXES = ("o1", "o3", "o4", "gpt-5", "codex")


def is_reasoning_model(model: str) -> bool:
    """A best guess from the model name: OpenAI's reasoning models (`o1`, `o3`, `o4…`,
    `gpt-5…` except `-chat`, `codex…`). Responses asks them for encrypted reasoning (other
    models reject the `include` with HTTP 400); Chat sends them `max_completion_tokens`
    (they reject `max_tokens`)."""
    name = model.rsplit("/", 1)[-1].lower()
    return name.startswith(REASONING_MODEL_PREFIXES) and "-chat" not in name
