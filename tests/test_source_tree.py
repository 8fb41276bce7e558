"""The source tree holds no leftovers of a merge or a patch (``*.orig``, ``*.rej``, ``*.bak``):
in a git checkout, among the tracked files and the untracked ones git does not ignore (so a
leftover fails here before it is committed); elsewhere (an unpacked sdist), among every file."""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEFTOVERS = ("*.orig", "*.rej", "*.bak")
SKIPPED = {".git", ".venv", "build", "dist", "__pycache__", ".hypothesis", ".pytest_cache"}


def _files() -> list[str]:
    if (ROOT / ".git").exists() and shutil.which("git"):
        done = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                              cwd=ROOT, capture_output=True, check=True)
        return [name for name in done.stdout.decode("utf-8", "surrogateescape").split("\0") if name]
    return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
            if p.is_file() and not SKIPPED & set(p.relative_to(ROOT).parts)]


def test_the_files_are_listed():
    files = _files()
    assert "tests/test_source_tree.py" in files and "csrc/json/tw_scan.c" in files


def test_no_merge_or_patch_leftovers():
    found = sorted(name for name in _files() if any(fnmatch.fnmatch(Path(name).name, p) for p in LEFTOVERS))
    assert found == [], f"leftovers of a merge or a patch in the tree: {', '.join(found)}"
