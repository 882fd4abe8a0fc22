"""The cases the readers read: a real recording with one to three mutations (or none), each
labelled by what was applied; the jobs of a case (each JS reader of its protocol, through the
proxy, and for an unmutated case directly too); what reading them served; and the kinds of
finding known when this was written (`KNOWN`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tests.proxy.differential import MUTATIONS, Recording
from tests.proxy.real_mutations import SHAPES

__all__ = [
    "KNOWN",
    "NEW",
    "READERS",
    "READER_NAMES",
    "UNMUTATED",
    "Case",
    "Job",
    "Served",
    "is_labelled",
    "jobs_for",
    "known_kind",
    "make_cases",
    "mutate",
]

READERS: dict[str, tuple[str, ...]] = {
    "chat": ("openai-node", "ai-sdk"),
    "responses": ("openai-node", "ai-sdk"),
    "anthropic": ("anthropic-node", "ai-sdk"),
    "gemini": ("genai-node", "ai-sdk"),
}
READER_NAMES = ("openai-node", "anthropic-node", "genai-node", "ai-sdk")
UNMUTATED = "unmutated"
NEW = "NEW"
# The kinds known when this was written (issue 27), each recognised by the mutations it needs
# (a shape's name, or its name and variant: `json in arguments: nan`) and the readers it shows
# in; anything else is NEW.
KNOWN: tuple[tuple[str, tuple[str, ...], frozenset[str]], ...] = (
    (
        "NaN: the AI SDK drops the chunk",
        ("json in arguments: nan", "json in arguments: infinity"),
        frozenset({"ai-sdk"}),
    ),
    (
        "Chat index null: openai-node drops the fragment",
        ("chat index: null",),
        frozenset({"openai-node"}),
    ),
    (
        "Anthropic start input: the SDK ends with other input",
        ("anthropic start input",),
        frozenset(READER_NAMES),
    ),
    ("Responses call without output_item.done", ("responses no done",), frozenset(READER_NAMES)),
)


@dataclass(slots=True)
class Case:
    number: int
    recording: Recording
    labels: tuple[str, ...]  # the mutations applied, a shape's with its variant (empty: unmutated)
    request: dict[str, Any]
    body: bytes

    @property
    def label(self) -> str:
        return " + ".join(self.labels) or UNMUTATED


def mutate(
    name: str, rng: random.Random, protocol: str, request: dict[str, Any], body: bytes
) -> tuple[dict[str, Any], bytes, str] | None:
    """A framing mutation or a shape applied: the request, the body, and the label (a shape's
    is its name and variant); None where it does not apply."""
    if name in SHAPES:
        shaped = SHAPES[name](rng, protocol, body, request)
        if shaped is None:
            return None
        body, request, variant = shaped
        return request, body, f"{name}: {variant}"
    changed = MUTATIONS[name](rng, protocol, body)
    return None if changed is None else (request, changed, name)


def is_labelled(label: str, mutation: str) -> bool:
    """Whether a case's label is `mutation` (a name, or a name and variant)."""
    return label == mutation or label.startswith(mutation + ": ")


def known_kind(label: str) -> str | None:
    return next(
        (kind for kind, names, _ in KNOWN if any(is_labelled(label, n) for n in names)), None
    )


def make_cases(
    recordings: Sequence[Recording], budget: int, seed: int, unmutated: float
) -> tuple[list[Case], list[str]]:
    """`budget` cases (the draws of `seed`); the mutations that raised, as lines."""
    rng = random.Random(seed)
    old, new = sorted(MUTATIONS), sorted(SHAPES)
    cases: list[Case] = []
    broken: list[str] = []
    attempts = 0
    while len(cases) < budget and attempts < budget * 50:
        attempts += 1
        recording = rng.choice(recordings)
        request, body = dict(recording.request), recording.body
        applied: list[str] = []
        if rng.random() >= unmutated:
            for _ in range(rng.choice([1, 1, 1, 2, 3])):
                name = rng.choice(new if rng.random() < 0.5 else old)
                try:
                    changed = mutate(name, rng, recording.protocol, request, body)
                except Exception as exc:  # the mutation's own bug: reported, never a traceback
                    broken.append(f"{recording.name} [{name}]: the mutation raised {exc!r}")
                    continue
                if changed is not None:
                    request, body, label = changed
                    applied.append(label)
            if not applied:
                continue
        cases.append(Case(len(cases), recording, tuple(applied), request, body))
    return cases, broken


@dataclass(frozen=True, slots=True)
class Job:
    case: int
    reader: str
    path: str  # "proxy" or "direct"

    @property
    def model(self) -> str:
        return f"lgcase-{self.case}-{READER_NAMES.index(self.reader)}-{self.path}"


def jobs_for(case: Case) -> list[Job]:
    paths = ("proxy", "direct") if not case.labels else ("proxy",)
    return [
        Job(case.number, reader, path)
        for reader in READERS[case.recording.protocol]
        for path in paths
    ]


@dataclass(slots=True)
class Served:
    results: dict[str, dict[str, Any]]
    requests: dict[str, dict[str, Any]]
    proxy_log: list[str]
    problems: list[str]
    unknown: int
