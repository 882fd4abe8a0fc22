"""`gemini parts`: a `functionCall` part added where a Gemini client might read it."""

from __future__ import annotations

import copy
import random
from typing import Any

from .events import Request, _Events, _shape

# --- Gemini ------------------------------------------------------------------------------------

_GEMINI_CALL: dict[str, Any] = {"name": "lockgate_read", "args": {"path": "a.txt"}}


@_shape("gemini")
def gemini_parts(
    rng: random.Random, events: _Events, request: Request
) -> tuple[Request, str] | None:
    finishing = [
        (index, payload)
        for index, payload in events.items()
        if isinstance(payload.get("candidates"), list)
        and payload["candidates"]
        and isinstance(payload["candidates"][0], dict)
        and payload["candidates"][0].get("finishReason") == "STOP"
    ]
    if not finishing:
        return None
    index, payload = finishing[-1]
    tools = list(request.get("tools") or [])
    declaration = {
        "name": "lockgate_read",
        "description": "read a file",
        "parameters": {
            "type": "OBJECT",
            "properties": {"path": {"type": "STRING"}},
            "required": ["path"],
        },
    }
    tools.append({"functionDeclarations": [declaration]})
    candidate = payload["candidates"][0]
    content = candidate.setdefault("content", {"role": "model", "parts": []})
    if not isinstance(content, dict):
        return None
    parts = content.setdefault("parts", [])
    if not isinstance(parts, list):
        return None
    how = rng.choice(
        ["added", "beside text", "thought", "no name", "args null", "second candidate"]
    )
    call = copy.deepcopy(_GEMINI_CALL)
    if how == "added":
        parts.append({"functionCall": call})
    elif how == "beside text":
        parts.append({"text": "Reading it.", "functionCall": call})
    elif how == "thought":
        parts.append({"thought": True, "functionCall": call})
    elif how == "no name":
        del call["name"]
        parts.append({"functionCall": call})
    elif how == "args null":
        call["args"] = None
        parts.append({"functionCall": call})
    else:
        payload["candidates"].append(
            {
                "index": 1,
                "content": {"role": "model", "parts": [{"functionCall": call}]},
                "finishReason": "STOP",
            }
        )
    events.changed.add(index)
    return {**request, "tools": tools}, how
