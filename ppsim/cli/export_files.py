"""Where ``ppsim export`` writes, checked before anything is written: a folder that exists, and no
file there that ppsim did not write (a schedule CSV and a DeepSpeed config, which hold no mark of
ppsim's, count as ppsim's when the file of the same export beside them, which does, is)."""

from __future__ import annotations

from pathlib import Path

from ppsim import outputs
from ppsim.errors import PpsimError, file_error, shown_path
from ppsim.frameworks import Export

UNMARKED = (".schedule.csv", ".ds_config.json")  #: files whose format has no room for ppsim's mark


def export_targets(folder: Path, stem: str, suffixes: list[str], inputs: list[Path], force: bool) -> dict[str, Path]:
    """The path of each file (by suffix), checked (the folder made if missing); PpsimError naming
    ``--out`` and the fix."""
    if folder.exists() and not folder.is_dir():
        raise PpsimError(f"{shown_path(folder)} is a file, not a folder; choose a folder", field="--out")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise file_error(folder, exc, writing=True, field="--out") from None
    paths = {sfx: folder / f"{stem}{sfx}" for sfx in suffixes}
    ours = any(p.exists() and outputs.written_by_ppsim(p) for sfx, p in paths.items() if sfx not in UNMARKED)
    for sfx, p in paths.items():
        outputs.check_output(p, "--out", inputs, force or (sfx in UNMARKED and ours))
    return paths


def write_export(result: Export, paths: dict[str, Path]) -> None:
    """Each file of the export to its path (none when ``paths`` is empty: they are printed)."""
    for sfx, text in result.files.items():
        if sfx not in paths:
            continue
        outputs.write_text(paths[sfx], text)
