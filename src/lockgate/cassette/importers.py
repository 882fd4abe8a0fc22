"""Cassettes from other recorders: the real-streams JSON files (one exchange each) and
vcrpy / pytest-recording cassettes (YAML or JSON, one exchange per interaction).

Every source is read and converted before anything is written (`import_sources`), so that a
bad file costs nothing but its one-line `CassetteError`; `write_imported` then saves each
cassette atomically (`format.save`), and never over a file already there: when any of the
names is taken, nothing is written (the names come from the sources, so a taken name is
almost always the same exchange imported before; a renamed copy would be judged twice).
Their recorded read boundaries are not known: each body is one read at t=0. The verdict is
null (lockgate did not decide on them when they were recorded): `lockgate lab --cassettes`
takes the unfaulted run as the reference.

What one import holds is bounded: every response body, once decoded (gzip, deflate,
base64, YAML `!!binary`), counts against `MAX_IMPORT_BYTES` for the whole import, and a
compressed body is decompressed piece by piece under what is left of it, so that a small
compressed file that would decompress to gigabytes costs no more than the bound before its
one-line `CassetteError`. Only regular files are read (`format.read_text`): a named pipe, a
device, a socket or a folder given as a source (or named like one in a source folder) is a
one-line error, never a hang. Header names and values are checked as `format.load` checks
them (`format.header_problem`): a value holding CR or LF is a bad source.

What is dropped: credentials and cookies (`public_headers`), the query of the URL (where
keys travel), and the headers that no longer describe the stored body (`content-encoding`
once a gzip or deflate body is decompressed, `content-length`, `transfer-encoding`,
`connection`, `keep-alive`). What is skipped, each with a reason: Bedrock recordings (a
binary event stream lockgate does not speak), interactions of no protocol lockgate speaks
(`GET /models`, embeddings, …), and successful responses that are not event streams.

The parts: `imported.py` (what an import yields, and what every importer shares),
`import_bodies.py` (the bound and the content codings), `import_real_streams.py` and
`import_vcr.py` (one importer per source format); this module reads and writes the files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from .format import CASSETTE_SUFFIX, CassetteError, CassetteExistsError, read_text, save
from .import_bodies import MAX_IMPORT_BYTES, BodyBudget
from .import_real_streams import _real_stream
from .import_vcr import _vcr, _yaml
from .imported import PROTOCOLS, Imported, Skipped, Sources, protocol_of_path

__all__ = [
    "MAX_IMPORT_BYTES",
    "PROTOCOLS",
    "SOURCE_SUFFIXES",
    "BodyBudget",
    "Imported",
    "Skipped",
    "Sources",
    "import_file",
    "import_sources",
    "protocol_of_path",
    "source_files",
    "write_imported",
]

SOURCE_SUFFIXES = (".json", ".yaml", ".yml")


def _stem(path: Path) -> str:
    name = path.name
    for suffix in SOURCE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def import_file(
    path: Path, protocol: str | None = None, *, budget: BodyBudget | None = None
) -> Sources:
    """The exchanges of one source file (a real-streams JSON file or a vcrpy cassette,
    told apart by their fields); CassetteError, one line naming the file, for anything
    else. Its decoded bodies count against `budget` (default: a budget of its own)."""
    # The bound is read here, as this module's `MAX_IMPORT_BYTES`, when the import starts.
    budget = BodyBudget(MAX_IMPORT_BYTES) if budget is None else budget
    if protocol is not None and protocol not in PROTOCOLS:
        raise CassetteError(f"unknown protocol {protocol!r} (known: {', '.join(PROTOCOLS)})")
    where = str(path)
    text = read_text(path, "utf-8-sig")  # other recorders may write a byte-order mark
    document: object
    if path.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise CassetteError(f"{where}: not JSON ({exc})") from None
        except RecursionError:
            raise CassetteError(f"{where}: nested too deeply") from None
    else:
        document = _yaml(text, where)
    if isinstance(document, Mapping) and "interactions" in document:
        return _vcr(document, where, _stem(path), protocol, budget)
    if isinstance(document, Mapping) and "protocol" in document and "body" in document:
        return _real_stream(document, where, _stem(path), protocol, budget)
    raise CassetteError(
        f"{where}: neither a vcrpy cassette (`interactions`) nor a recorded stream "
        "(`protocol`, `body`)"
    )


def source_files(sources: Sequence[Path]) -> list[Path]:
    """The files to read: each file given, and every `*.json`, `*.yaml`, `*.yml` in a
    folder given (name order, not recursive; one so named that is not a regular file, a
    folder or a named pipe, is read as a file and refused)."""
    files: list[Path] = []
    for source in sources:
        if source.is_dir():
            found = sorted(p for p in source.iterdir() if p.name.lower().endswith(SOURCE_SUFFIXES))
            if not found:
                raise CassetteError(f"{source}: no *.json, *.yaml or *.yml files in this folder")
            files.extend(found)
        else:
            files.append(source)
    return files


def import_sources(sources: Sequence[Path], protocol: str | None = None) -> Sources:
    """Every exchange of every source, converted (nothing written yet), their decoded
    bodies under `MAX_IMPORT_BYTES` in all. Two exchanges that would take the same file name
    get `-2`, `-3`, … before the suffix."""
    imported: list[Imported] = []
    skipped: list[Skipped] = []
    taken: set[str] = set()
    budget = BodyBudget(MAX_IMPORT_BYTES)
    for path in source_files(sources):
        found = import_file(path, protocol, budget=budget)
        skipped.extend(found.skipped)
        for item in found.imported:
            name, number = item.name, 1
            while name in taken:
                number += 1
                name = item.name.removesuffix(CASSETTE_SUFFIX) + f"-{number}{CASSETTE_SUFFIX}"
            taken.add(name)
            imported.append(Imported(name, item.cassette, item.origin))
    return Sources(tuple(imported), tuple(skipped))


def write_imported(found: Sources, folder: Path) -> list[Path]:
    """Save every imported cassette in `folder` (made if missing), each atomically and
    never over a file already there: when any name is taken, CassetteError naming it and
    nothing written. (Should a file appear under a name while the others are written, that
    one is refused all the same, `format.save(replace=False)`, and the error names it.)"""
    if folder.exists() and not folder.is_dir():
        raise CassetteError(f"{folder}: not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CassetteError(f"cannot make {folder}: {exc.strerror or exc}") from None
    taken = [
        folder / item.name
        for item in found.imported
        if (folder / item.name).is_symlink() or (folder / item.name).exists()
    ]
    if taken:
        more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
        raise CassetteError(
            f"{taken[0]} already exists{more}; cassette import never overwrites a cassette "
            "(remove it, or import --to another folder)"
        )
    written: list[Path] = []
    for item in found.imported:
        path = folder / item.name
        try:
            save(item.cassette, path, replace=False)
        except CassetteExistsError:
            done = f" ({len(written)} written before it)" if written else ""
            raise CassetteError(
                f"{path} already exists: it appeared during the import and was not "
                f"overwritten{done}"
            ) from None
        written.append(path)
    return written
