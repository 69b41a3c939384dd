"""Writing output files without ever destroying something the user wrote.

An output path may be overwritten only if it does not exist or was itself written by ppsim (a ppsim
trace or plan, a Chrome trace, a ppsim HTML page or PNG); anything else needs ``force``. Inputs of the same
command are never overwritten. Files are written to a temporary name and renamed into place, so an
interrupted run leaves no half-written file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from ppsim.errors import PpsimError
from ppsim.formats import written_markers

_OUR_MARKERS = written_markers()


def written_by_ppsim(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return any(m in head for m in _OUR_MARKERS)


def check_output(path: str | Path, option: str, inputs: Iterable[str | Path] = (), force: bool = False) -> Path:
    """Return the resolved output path, or raise a PpsimError naming ``option`` and the fix."""
    p = Path(path)
    for i in inputs:
        if p.resolve() == Path(i).resolve():
            raise PpsimError(f"{p} is an input of this command; choose another output file", field=option)
    if p.is_dir():
        raise PpsimError(f"{p} is a directory; give a file name", field=option)
    if not p.parent.exists():
        raise PpsimError(f"directory {p.parent} does not exist; create it first", field=option)
    if p.exists() and not force and not written_by_ppsim(p):
        raise PpsimError(f"{p} exists and was not written by ppsim; choose another name or pass --force", field=option)
    return p


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` then rename tmp onto ``path``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp makes the file private; outputs are ordinary files
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda t: t.write_text(text))
