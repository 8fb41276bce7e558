"""Generated C tables match their generators: the checked-in output is what the script in the
repository writes, byte for byte (regenerate with the command in the failure message)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"


@pytest.mark.parametrize("generator, output", [("gen_pow5_table.py", "codecs/tw_pow5_table.h")])
def test_generated_table_is_up_to_date(generator, output, tmp_path):
    fresh = tmp_path / Path(output).name
    subprocess.run([sys.executable, str(CSRC / generator), str(fresh)], check=True)
    assert fresh.read_bytes() == (CSRC / output).read_bytes(), (
        f"csrc/{output} differs from its generator's output: run python3 csrc/{generator}")


def test_wire_table_outputs_are_up_to_date(tmp_path):
    """The field enum, scanner rules, Cython ids and ctypes mirror are what csrc/gen_fields.py
    writes from the wire table (src/tokenwire/base/_table.py)."""
    subprocess.run([sys.executable, str(CSRC / "gen_fields.py"), str(tmp_path)], check=True)
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == sorted(["csrc/json/tw_fields.def", "src/tokenwire/_fields.pxi", "tests/c/tw_fields.py"])
    for name in written:
        assert (tmp_path / name).read_bytes() == (ROOT / name).read_bytes(), (
            f"{name} differs from what the wire table gives: run python3 csrc/gen_fields.py")


def test_wire_table_matches_the_compiled_scanner():
    """The compiled core was built from the table as it is: the same number of fields."""
    core = pytest.importorskip("tokenwire._core")
    from tokenwire.base import _table

    assert core._NFIELDS == len(_table.CHOICE_FIELDS)


def test_the_scanners_fixed_contexts_are_the_generators():
    """The key rules are sorted by context for the scanner's binary search, so the contexts
    tw_scan.c names before the generated ones must be gen_fields.py's FIXED_CONTEXTS, in order:
    a context out of place would lose its keys without a word."""
    import importlib.util
    import re

    spec = importlib.util.spec_from_file_location("_gen_fields", CSRC / "gen_fields.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    source = (CSRC / "json" / "tw_scan.c").read_text()
    body = source[source.index("TWS_C_NONE = 0"):source.index('#include "json/tw_fields.def"')]
    assert tuple(re.findall(r"\bTWS_C_(\w+)\b", body)) == gen.FIXED_CONTEXTS
