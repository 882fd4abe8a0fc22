"""The provider flags of `lockgate run`, made from the providers' own declarations
(`providers/<name>/options.py`), and the provider names the commands offer."""

from __future__ import annotations

import argparse


def provider_names() -> list[str]:
    from ..providers import PROVIDERS

    return list(PROVIDERS)


PROVIDER_OPTION = "provider option "  # the prefix of a provider option's `dest`


def _add_provider_options(run: argparse.ArgumentParser) -> None:
    """One flag per provider option, made from the providers' own declarations: the value
    stays the text given, parsed by the chosen provider's rule (`provider_options`). A flag
    several providers declare is one flag, its help naming them all."""
    from ..providers import PROVIDERS
    from ..providers.base import OptionSpec, option_fields

    owners: dict[str, list[tuple[str, OptionSpec]]] = {}
    for entry in PROVIDERS.values():
        if entry.options is not None:
            for _, spec in option_fields(entry.options):
                owners.setdefault(spec.flag, []).append((entry.name, spec))
    for flag, declared in owners.items():
        spec = declared[0][1]
        shared = all(other.choices == spec.choices for _, other in declared)
        run.add_argument(
            flag,
            dest=PROVIDER_OPTION + flag,
            metavar=spec.metavar,
            choices=spec.choices if shared else None,
            help=f"{', '.join(name for name, _ in declared)} only: {spec.help}",
        )


def given_provider_options(args: argparse.Namespace) -> dict[str, str]:
    """The provider option flags given on the command line, and their text."""
    return {
        dest.removeprefix(PROVIDER_OPTION): value
        for dest, value in vars(args).items()
        if dest.startswith(PROVIDER_OPTION) and value is not None
    }
