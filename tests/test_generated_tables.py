"""Generated C tables match their generators: the checked-in output is what the script in the
repository writes, byte for byte (regenerate with the command in the failure message)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parents[1] / "csrc"


@pytest.mark.parametrize("generator, output", [("gen_pow5_table.py", "tw_pow5_table.h")])
def test_generated_table_is_up_to_date(generator, output, tmp_path):
    fresh = tmp_path / output
    subprocess.run([sys.executable, str(CSRC / generator), str(fresh)], check=True)
    assert fresh.read_bytes() == (CSRC / output).read_bytes(), (
        f"csrc/{output} differs from its generator's output: run python3 csrc/{generator}")
