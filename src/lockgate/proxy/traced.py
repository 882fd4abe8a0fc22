"""What the tracer is told of one request when it ended (`summary`), read from its flow: the
HTTP stages (`pipeline.py`) and each response on a relayed WebSocket (`relay_response.py`)
tell it alike."""

from __future__ import annotations

from ..telemetry import RequestSummary, TokenUsage
from .flow import Flow

__all__ = ["OPERATIONS", "summary"]

# The GenAI operation of each protocol's requests (the tracer's `gen_ai.operation.name`).
OPERATIONS = {"gemini": "generate_content"}
_OPERATION = "chat"  # responses, chat, anthropic


def summary(flow: Flow, streaming: bool = True) -> RequestSummary:
    """What the tracer is told of a request when it ended, read from its flow: low
    cardinality and secret-free (no path, prompt, argument or key)."""
    usage = flow.usage
    ended = flow.started if flow.ended is None else flow.ended
    refused = flow.kind is not None and flow.outcome in ("refused", "withheld")
    return RequestSummary(
        protocol=flow.protocol,
        operation=OPERATIONS.get(flow.protocol or "", _OPERATION),
        route=flow.route,
        outcome=flow.outcome,
        started=flow.started,
        ended=ended,
        status=flow.status,
        request_model=flow.request_model,
        response_model=flow.response_model,
        finish_reasons=(flow.finish_reason,) if flow.finish_reason else (),
        usage=(None if usage is None else TokenUsage(usage.input_tokens, usage.output_tokens)),
        error_type=f"lockgate.{flow.kind}" if refused else None,
        first_token_at=flow.first_sent_at,
        released_calls=flow.calls,
        withheld_calls=flow.withheld,
        retries=flow.retries,
        streaming=streaming,
    )
