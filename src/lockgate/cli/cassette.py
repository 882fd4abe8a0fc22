"""`lockgate cassette import SRC... --to DIR [--protocol P]`: other recorders' exchanges as
cassettes, one per exchange.

SRC: real-streams JSON files, vcrpy / pytest-recording cassettes (YAML or JSON), or folders of
them (`*.json`, `*.yaml`, `*.yml`). Every source is read and converted before any file is
written, and each cassette is written atomically and never over an existing file: a bad
source (one that is not a regular file, a header that would inject another, bodies that
decode past the import's bound, `importers.MAX_IMPORT_BYTES`) or a cassette name already
taken in DIR is one line naming it (exit 2) and nothing written. Stdout: one `skipped
ORIGIN: REASON` line per exchange not imported, then `wrote N cassettes to DIR`. Exit 0; 2
for a bad source, a name taken, a folder that cannot be written, or nothing importable.
"""

from __future__ import annotations

import argparse

from .args import one_line
from .codes import EXIT_OK, UsageError

__all__ = ["run_cassette"]


def run_cassette(args: argparse.Namespace) -> int:
    from ..cassette.format import CassetteError
    from ..cassette.importers import import_sources, write_imported

    try:
        found = import_sources(args.sources, args.protocol)
    except CassetteError as exc:
        raise UsageError(str(exc)) from None
    for skipped in found.skipped:
        print(one_line(f"skipped {skipped.origin}: {skipped.reason}"))
    if not found.imported:
        raise UsageError("nothing to import: every exchange was skipped")
    try:
        written = write_imported(found, args.to)
    except CassetteError as exc:
        raise UsageError(str(exc)) from None
    noun = "cassette" if len(written) == 1 else "cassettes"
    print(one_line(f"wrote {len(written)} {noun} to {args.to}"))
    return EXIT_OK
