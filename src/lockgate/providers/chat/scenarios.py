"""Chat Completions provider's own lab scenarios: the rules and quirks only this protocol has,
beside the neutral scenarios every protocol runs (`lockgate.lab.scenarios`).

The scenarios live in two modules: `scenarios_quirks.py` (the quirks of compatible servers)
and `scenarios_faults.py` (the fail-closed side); `scenarios_kit.py` holds what they share.
This module is the one the registry imports (`SCENARIOS`), in that order."""

from __future__ import annotations

from ...scripted.scenario import Scenario, own
from .render import ChatRenderer, ChunkBuilder, render
from .scenarios_faults import FAULTS
from .scenarios_quirks import QUIRKS

SCENARIOS: tuple[Scenario, ...] = own("chat", *QUIRKS, *FAULTS)

__all__ = ["SCENARIOS", "ChatRenderer", "ChunkBuilder", "render"]
