"""The C kernels as a shared library for the ctypes checks (check_scan.py, check_records.py,
check_heads.py), and the re-run of a check under AddressSanitizer + UBSan."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"


def build(out: Path, name: str, sources: Sequence[str | Path], *, sanitize: bool,
          portable: bool = False) -> Path:
    """Compile ``sources`` (paths below csrc/ such as "json/tw_scan.c", or paths) into ``out``/lib<name>[_san][_portable].so
    with the project's warnings as errors; ``sanitize`` adds ASan + UBSan (no recovery),
    ``portable`` builds without SIMD. TW_CHECK_OUT, when set, is the folder instead of ``out``."""
    out = Path(os.environ.get("TW_CHECK_OUT") or out)
    out.mkdir(parents=True, exist_ok=True)
    lib = out / f"lib{name}{'_san' if sanitize else ''}{'_portable' if portable else ''}.so"
    cmd = [os.environ.get("CC", "cc"), "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
           "-I", str(CSRC), *(str(s if isinstance(s, Path) else CSRC / s) for s in [*sources, "base/tw_mem.c", "base/tw_cpu.c", "base/tw_hash.c"]),
           "-o", str(lib), "-lm"]
    if sanitize:
        cmd += ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
                "-fno-sanitize-recover=all"]
    else:
        cmd += ["-O2"]
    if portable:
        cmd += ["-DTW_NO_SIMD"]
    subprocess.run(cmd, check=True)
    return lib


def load(lib: Path) -> ctypes.CDLL:
    """The library, its tables' hash secret drawn (csrc/base/tw_hash.h) as the compiled module
    draws it at import."""
    dll = ctypes.CDLL(str(lib))
    dll.tw_hash_seed.argtypes = [ctypes.c_char_p]
    dll.tw_hash_seed(os.urandom(32))
    return dll


def rerun_under_asan() -> int | None:
    """In the parent: run this check again with the ASan runtime preloaded (leak detection
    off: CPython's own allocations) and return its exit status. In that child: None."""
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        return None
    asan = subprocess.run([os.environ.get("CC", "cc"), "-print-file-name=libasan.so"],
                          capture_output=True, text=True, check=True).stdout.strip()
    env = dict(os.environ, LD_PRELOAD=asan, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    return subprocess.call([sys.executable, *sys.argv], env=env)
