"""Gemini end to end: `lockgate run --provider gemini` repairs the fixture against
`lockgate serve --provider gemini` and sends the first response's thought signature back
exactly; the official `google-genai` client drives `serve --provider gemini` through the
whole repair conversation, streaming and not."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.lab.scenarios import EDIT_FIX, FIXED_SOURCE, repair_turns
from lockgate.lab.server import ServerThread, serve_script
from lockgate.providers.gemini.render import ChunkBuilder, base64_signature
from lockgate.scripted.reply import LAB_MODEL

from ...helpers import ends_with_file_and_usage, run_lockgate

SIGNATURE = base64_signature("lockgate test: the signature the second request must carry")


def _model_parts(request_body: Any) -> list[dict[str, Any]]:
    return [
        part
        for content in request_body.get("contents", [])
        if content.get("role") == "model"
        for part in content.get("parts", [])
    ]


def test_run_repairs_the_fixture_and_sends_the_signature_back_exactly() -> None:
    edit = ChunkBuilder("resp-sig-1").text("Fixing add.", 2)
    edit.call("edit", EDIT_FIX, signature=SIGNATURE).finish()
    answer = ChunkBuilder("resp-sig-2").text("Fixed.", 1).finish()
    with ServerThread([edit.turn(), answer.turn()], provider="gemini") as running:
        result = run_lockgate(
            "run",
            "--provider",
            "gemini",
            "--base-url",
            running.base_url,
            "--allow-execution",
            "--model",
            LAB_MODEL,
            env={"GEMINI_API_KEY": "gm-test-key-not-a-secret"},
        )
        assert running.server is not None
        requests = running.server.requests
    assert result.returncode == 0, result.stderr
    assert "stopped: model_finished" in result.stdout
    assert ends_with_file_and_usage(result.stdout, FIXED_SOURCE)
    assert len(requests) == 2
    calls = [p for p in _model_parts(requests[1].body) if "functionCall" in p]
    assert len(calls) == 1
    assert calls[0]["thoughtSignature"] == SIGNATURE  # byte for byte, on its call
    assert calls[0]["functionCall"]["name"] == "edit"
    assert "id" not in calls[0]["functionCall"]  # the server sent none: none is invented
    assert requests[1].headers.get("x-goog-api-key") == "[redacted]"


def test_the_key_may_come_from_google_api_key() -> None:
    answer = ChunkBuilder("resp-key").text("The bug is in add.", 1).finish()
    with ServerThread([answer.turn()], provider="gemini") as running:
        result = run_lockgate(
            "run",
            "--provider",
            "gemini",
            "--base-url",
            running.base_url,
            env={"GOOGLE_API_KEY": "gm-fallback-key-not-a-secret", "GEMINI_API_KEY": ""},
        )
    assert result.returncode == 0, result.stderr
    missing = run_lockgate(
        "run", "--provider", "gemini", env={"GOOGLE_API_KEY": "", "GEMINI_API_KEY": ""}
    )
    assert missing.returncode == 2
    assert missing.stderr == (
        "lockgate: GEMINI_API_KEY or GOOGLE_API_KEY is not set; no request was made\n"
    )


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "whole"])
async def test_the_official_client_drives_the_repair_conversation(streaming: bool) -> None:
    from google import genai
    from google.genai import types

    turns = repair_turns()
    calls: list[tuple[str, dict[str, Any]]] = []
    texts: list[str] = []
    async with serve_script(turns, provider="gemini") as server:
        client = genai.Client(
            api_key="lab-key-not-a-secret",
            http_options=types.HttpOptions(base_url=server.base_url, api_version="v1beta"),
        )
        try:
            for _ in turns:
                if streaming:
                    stream = await client.aio.models.generate_content_stream(
                        model=LAB_MODEL, contents="fix the bug"
                    )
                    pieces = [piece async for piece in stream]
                else:
                    pieces = [
                        await client.aio.models.generate_content(
                            model=LAB_MODEL, contents="fix the bug"
                        )
                    ]
                for piece in pieces:
                    calls.extend(
                        (c.name or "", dict(c.args or {})) for c in piece.function_calls or []
                    )
                    content = piece.candidates[0].content if piece.candidates else None
                    parts = content.parts if content is not None else None
                    texts.extend(p.text for p in parts or [] if p.text and not p.thought)
                assert pieces[-1].candidates is not None
                assert pieces[-1].candidates[0].finish_reason == types.FinishReason.STOP
        finally:
            await client.aio.aclose()
        outcomes = [request.outcome for request in server.requests]
    assert [name for name, _ in calls] == ["discover", "read", "test", "read", "edit", "test"]
    assert ("edit", EDIT_FIX) in calls
    assert outcomes == ["stream" if streaming else "json"] * 7
    assert "".join(texts).endswith("it now returns `a + b` and both tests pass.")
