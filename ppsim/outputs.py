"""Writing output files without ever destroying something the user wrote.

An output path may be overwritten only if it does not exist or was itself written by ppsim (a ppsim
trace or plan, a Chrome trace, a ppsim HTML page or PNG); anything else needs ``force``. Inputs of the same
command are never overwritten. Files are written to a temporary name and renamed into place, so an
interrupted run leaves no half-written file.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from ppsim.errors import PpsimError, file_error, shown_path
from ppsim.formats import written_markers

_OUR_MARKERS = written_markers()


def written_by_ppsim(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return any(m in head for m in _OUR_MARKERS)


def check_inputs(inputs: Iterable[str | Path]) -> list[Path]:
    """The input files of a command (a run folder stands for its ``trace.json``), each reachable:
    a name too long or a symbolic link loop is one PpsimError naming the path and the fix (a
    missing file is left to the reader, which knows what the file should be)."""
    files: list[Path] = []
    for i in inputs:
        p = Path(i)
        try:
            p.stat()
        except FileNotFoundError:
            pass
        except (OSError, RuntimeError) as exc:
            raise file_error(p, exc, writing=False) from None
        files.append(p / "trace.json" if p.is_dir() else p)
    return files


def check_output(path: str | Path, option: str, inputs: Iterable[str | Path] = (), force: bool = False) -> Path:
    """Return the output path, or raise a PpsimError naming ``option``, the path and the fix: never
    an input, a folder or a file ppsim did not write (without ``force``), and its folder must exist
    and take a new file (checked by making and removing an empty one, as root ignores permissions)."""
    p = Path(path)
    try:
        _check(p, option, inputs, force)
        _probe(p.parent)
    except (OSError, RuntimeError) as exc:  # pathlib raises RuntimeError on a symbolic link loop
        raise file_error(p, exc, writing=True, field=option) from None
    return p


def _check(p: Path, option: str, inputs: Iterable[str | Path], force: bool) -> None:
    for i in inputs:
        if p.resolve() == Path(i).resolve():
            raise PpsimError(f"{shown_path(p)} is an input of this command; choose another output file", field=option)
    if p.is_dir():
        raise PpsimError(f"{shown_path(p)} is a directory; give a file name", field=option)
    if not p.parent.exists():
        raise PpsimError(f"directory {shown_path(p.parent)} does not exist; create it first", field=option)
    if not p.parent.is_dir():
        raise PpsimError(f"{shown_path(p.parent)} is a file, not a directory; choose a path in a directory", field=option)
    if len(p.name.encode()) > _name_max(p.parent):
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), str(p))
    if p.exists() and not force and not written_by_ppsim(p):
        raise PpsimError(f"{shown_path(p)} exists and was not written by ppsim; choose another name or pass --force",
                         field=option)


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _probe(folder: Path) -> None:
    """Make and remove an empty file in ``folder``: an OSError if it cannot take one."""
    fd, tmp = tempfile.mkstemp(prefix=".ppsim-", suffix=".probe", dir=folder)
    os.close(fd)
    os.unlink(tmp)


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Call ``write(tmp)`` then rename tmp onto ``path``; an OS fault (no space, no permission) is a
    PpsimError naming ``path``, and nothing is left behind."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:40]}.", suffix=".tmp", dir=path.parent)
    except (OSError, RuntimeError) as exc:
        raise file_error(path, exc, writing=True) from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp makes the file private; outputs are ordinary files
        os.replace(tmp_path, path)
    except OSError as exc:
        raise file_error(path, exc, writing=True) from None
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda t: t.write_text(text))
