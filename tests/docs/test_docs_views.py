"""docs/views.md cannot rot: each of its commands runs, and each picture it shows is the one its command makes."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from browser import find_chromium

from conftest import ROOT, sh_commands
from ppsim.trace.chrome import validate_chrome_trace

DOC = ROOT / "docs" / "views.md"
BIN = Path(sys.executable).parent


def commands() -> list[str]:
    return sh_commands(DOC)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", data[16:24])


def test_every_picture_has_its_command() -> None:
    text = DOC.read_text(encoding="utf-8")
    shown = re.findall(r"!\[[^\]]*\]\((img/[^)]+\.png)\)", text)
    made = [c.split("--png ")[1].split()[0] for c in commands() if "--png " in c]
    assert shown and sorted(f"docs/{p}" for p in shown) == sorted(made)
    for p in shown:
        assert (ROOT / "docs" / p).is_file(), p


@pytest.mark.slow  # draws PNGs in a browser
@pytest.mark.skipif(find_chromium() is None, reason="--png needs chromium: `make test` installs it")
def test_every_command_runs_and_makes_the_picture_shown(tmp_path: Path) -> None:
    for folder in ("scenarios", "tests/data"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    (tmp_path / "docs" / "img").mkdir(parents=True)
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    for cmd in commands():
        args = shlex.split(cmd)
        assert args[0] == "ppsim", cmd
        res = subprocess.run([sys.executable, "-c", "from ppsim.cli import main; main()", *args[1:]], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, f"{cmd}\n{res.stdout}\n{res.stderr}"
        if "--png" in args:
            out = args[args.index("--png") + 1]
            assert png_size(tmp_path / out) == png_size(ROOT / out), f"{out}: the picture in docs/ is not what {cmd!r} makes"
        if "--trace" in args:
            doc = json.loads((tmp_path / args[args.index("--trace") + 1]).read_text())
            assert validate_chrome_trace(doc) == []
            assert any(e["ph"] == "C" and e["name"] == "memory_bytes" for e in doc["traceEvents"])
