"""What the scripted server (`server.py`) and its WebSocket mode (`websocket.py`) record of
each request they took."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RecordedRequest"]


@dataclass(slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    received_at: float = field(default_factory=time.monotonic)  # when the request was read
    outcome: str = ""  # what the server answered: stream, json, HTTP status, dropped
    client_closed_early: bool = False
    consumed_turn: bool = True  # False: not the protocol's POST path (404/405)
    # (monotonic time, what happened): "stall", "hang", "client closed", "finished"
    timeline: list[tuple[float, str]] = field(default_factory=list)
