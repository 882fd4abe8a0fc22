"""Real Codex on the Responses WebSocket, through `lockgate proxy`, against a hostile
loopback WebSocket server (`python -m interop.codex_ws.run`; opt-in, never in pytest)."""
