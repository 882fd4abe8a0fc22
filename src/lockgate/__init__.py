"""lockgate: a provider boundary for tool-using agents.

A complete, validated response can request an action. An incomplete response cannot
accidentally execute one.

The public surface is listed in `__all__`; names are imported on first use, so that
`import lockgate` (and the CLI's `--help`) stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__

_EXPORTS = {
    "StreamingModelClient": "client",
    "ModelClient": "client",
    "Message": "conversation",
    "ToolCall": "conversation",
    "ToolSpec": "conversation",
    "Usage": "conversation",
    "RunResult": "conversation",
    "FailureKind": "errors",
    "ResponseFailure": "errors",
    "OpenFailure": "errors",
    "GateLimits": "gate",
    "RetryPolicy": "retry",
    "run_agent": "loop",
    "ToolExecutor": "tools",
    "ToolError": "tools",
    "PROVIDERS": "providers",
    "Provider": "providers",
    "CodecOptions": "providers",
    "TransportOptions": "transport",
    "Redactor": "credentials",
    "GatingOptions": "proxy",
    "GatingTransport": "proxy.transport",
    "gated_client": "proxy.transport",
    "gated_bedrock": "proxy.boto3_gate",
    "BedrockGateError": "proxy.boto3_gate",
}

__all__ = [
    "PROVIDERS",
    "BedrockGateError",
    "CodecOptions",
    "FailureKind",
    "GateLimits",
    "GatingOptions",
    "GatingTransport",
    "Message",
    "ModelClient",
    "OpenFailure",
    "Provider",
    "Redactor",
    "ResponseFailure",
    "RetryPolicy",
    "RunResult",
    "StreamingModelClient",
    "ToolCall",
    "ToolError",
    "ToolExecutor",
    "ToolSpec",
    "TransportOptions",
    "Usage",
    "__version__",
    "gated_bedrock",
    "gated_client",
    "run_agent",
]

if TYPE_CHECKING:
    from .client import ModelClient, StreamingModelClient
    from .conversation import Message, RunResult, ToolCall, ToolSpec, Usage
    from .credentials import Redactor
    from .errors import FailureKind, OpenFailure, ResponseFailure
    from .gate import GateLimits
    from .loop import run_agent
    from .providers import PROVIDERS, CodecOptions, Provider
    from .proxy import GatingOptions
    from .proxy.boto3_gate import BedrockGateError, gated_bedrock
    from .proxy.transport import GatingTransport, gated_client
    from .retry import RetryPolicy
    from .tools import ToolError, ToolExecutor
    from .transport import TransportOptions


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lockgate' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
