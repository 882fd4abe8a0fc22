"""What `lockgate serve --provider bedrock` and the lab answer with: Converse and
ConverseStream (`render.BedrockRenderer`), and InvokeModel with and without a response
stream for Anthropic models (`lab_invoke`), each request by its path; and the lab's other
client of the same server, InvokeModelWithResponseStream's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lab_invoke import INVOKE_LAB, is_invoke_path
from .lab_invoke import RENDERER as INVOKE
from .render import BedrockRenderer

if TYPE_CHECKING:
    from ...scripted.renderer import Renderer
    from ..base import Provider

__all__ = ["RENDERER", "BedrockServerRenderer"]


class BedrockServerRenderer(BedrockRenderer):
    """Bedrock's server: Converse here, InvokeModel by `lab_invoke`'s renderer."""

    def for_path(self, path: str) -> Renderer:
        """The renderer of a request to `path`: this one for Converse, `lab_invoke`'s for
        InvokeModel (Anthropic events in `chunk` messages)."""
        return INVOKE if is_invoke_path(path) else self

    def lab_variants(self) -> tuple[Provider, ...]:
        """The lab's other clients of this server: InvokeModelWithResponseStream's."""
        return (INVOKE_LAB,)


RENDERER = BedrockServerRenderer()
