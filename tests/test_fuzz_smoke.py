"""A short run of every fuzz target (fuzz/), seeded from the sample workload and corpus."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris", reason="atheris (the fuzzing engine) is not installed")
from tokenwire import implementation

SMOKE = Path(__file__).parent.parent / "fuzz" / "smoke.py"


@pytest.mark.skipif(implementation != "c", reason="the fuzz targets compare the compiled core with the reference")
def test_fuzz_smoke():
    seconds = os.environ.get("TOKENWIRE_FUZZ_SECONDS", "10")
    result = subprocess.run([sys.executable, str(SMOKE), "--seconds", seconds], capture_output=True, text=True, timeout=600)
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
