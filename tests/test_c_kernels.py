"""The C kernels' own test programs (tests/c): base64, the structural scanner, the per-token
JSON record reader and head selection, each against an independent reference written in C,
including the exact-sum decisions at the head-mass and normalization thresholds, the
compact-row and support checks, every path against the scalar one, and the batch path's padded
blocks against an item-by-item reference; and, briefly, the ctypes
checks of the same kernels against orjson and the Python reference."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "c"


def _installed(name: str) -> bool:
    """Whether ``name`` is installed (asked of the metadata: the run that hides orjson from
    this process still lets the checks, separate processes, use it as their oracle)."""
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


_NEEDS_ORJSON = pytest.mark.skipif(not _installed("orjson"), reason="this check's oracle is orjson, not installed")


@pytest.mark.skipif(sys.platform != "linux" or not shutil.which("make") or not shutil.which("cc"),
                    reason="needs make and a C compiler (Linux)")
@pytest.mark.parametrize("target", ["test", "scan-test", "records-test", "heads-test",
                                    "validate-test", "pad-test"])
def test_c_kernel_suite(target, tmp_path):
    out = tmp_path / "build"
    variables = [f"OUT={out}", f"SCAN_OUT={out}", f"RECORDS_OUT={out}", f"HEADS_OUT={out}",
                 f"VALIDATE_OUT={out}", f"PAD_OUT={out}"]
    result = subprocess.run(["make", "-s", "-C", str(HERE), target, *variables],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " 0 failures" in result.stdout


@pytest.mark.skipif(sys.platform != "linux" or not shutil.which("cc"), reason="needs a C compiler (Linux)")
@pytest.mark.parametrize("check", [
    pytest.param(["check_scan.py", "--rounds", "200", "--no-samples"], id="scan", marks=_NEEDS_ORJSON),
    pytest.param(["check_records.py", "--rounds", "100", "--numbers", "500"], id="records", marks=_NEEDS_ORJSON),
    pytest.param(["check_heads.py", "--heads", "5000"], id="heads"),
])
def test_ctypes_differential_checks(check):
    """The ctypes checks of the kernels against orjson and the Python reference (their long
    runs are `make scan-check records-check heads-check`), briefly: they stay runnable."""
    result = subprocess.run([sys.executable, *check], cwd=HERE, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
