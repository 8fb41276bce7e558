"""Compare tests/jsontestsuite.py with a copy of JSONTestSuite at the pinned commit: every
file of test_parsing/ must be in the table with the same bytes, and the table must hold no
other case. Run by hand (it needs the suite, which the project does not ship):

    python tests/check_jsontestsuite.py PATH

PATH is a clone of github.com/nst/JSONTestSuite (a work tree or a bare git directory): the
files are read from its commit jsontestsuite.PINNED with git, whatever is checked out; or,
with --tree, a directory holding test_parsing/ as it is. Exit status 0 when every case
matches, 1 otherwise.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import jsontestsuite

PREFIXES = {"y_": jsontestsuite.ACCEPT, "n_": jsontestsuite.REFUSE, "i_": jsontestsuite.IMPLEMENTATION_DEFINED}


def from_git(path: Path, commit: str) -> dict[str, bytes]:
    def git(*args: str) -> bytes:
        return subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True).stdout

    names = git("ls-tree", "--name-only", f"{commit}:test_parsing").decode().split("\n")
    return {name: git("cat-file", "blob", f"{commit}:test_parsing/{name}") for name in names if name}


def from_tree(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (path / "test_parsing").iterdir() if p.is_file()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--tree", action="store_true", help="read PATH/test_parsing as it is, not from git")
    args = parser.parse_args()
    files = from_tree(args.path) if args.tree else from_git(args.path, jsontestsuite.PINNED)
    table = {f"{prefix}{name}.json": raw for prefix, cases in PREFIXES.items() for name, raw in cases.items()}
    matched = sorted(name for name, raw in files.items() if table.get(name) == raw)
    differ = sorted(name for name, raw in files.items() if name in table and table[name] != raw)
    missing = sorted(set(files) - set(table))
    extra = sorted(set(table) - set(files))
    where = "test_parsing/" if args.tree else f"commit {jsontestsuite.PINNED}"
    counts = ", ".join(f"{sum(n.startswith(p) for n in matched)} {p}" for p in PREFIXES)
    print(f"{len(matched)} of {len(files)} files of {where} match the table ({counts})")
    for label, names in (("bytes differ", differ), ("not in the table", missing), ("not in the suite", extra)):
        for name in names:
            print(f"  {label}: {name}")
    return 0 if not (differ or missing or extra) else 1


if __name__ == "__main__":
    sys.exit(main())
