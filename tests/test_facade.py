"""The package facade: implementation selection, the switches, the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import tokenwire


def run(code: str, **env: str) -> str:
    environment = {**os.environ, **env}
    out = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_no_extensions_switch_forces_the_reference():
    assert run("import tokenwire; print(tokenwire.implementation)", TOKENWIRE_NO_EXTENSIONS="1") == "python"


def test_implementation_is_reported():
    assert tokenwire.implementation in ("c", "python")
    if tokenwire.implementation == "c":
        assert tokenwire.simd_path() in tokenwire.simd_paths()


def test_simd_switch():
    if tokenwire.implementation != "c":
        return
    for path in tokenwire.simd_paths():
        assert run("import tokenwire; print(tokenwire.simd_path())", TOKENWIRE_SIMD=path) == path


def test_bench_command_json():
    out = subprocess.run(
        [sys.executable, "-m", "tokenwire", "bench", "--quick", "--json", "--workload", "packed_128"],
        capture_output=True, text=True, check=True,
    )
    result = json.loads(out.stdout)
    assert result["implementation"] == tokenwire.implementation and result["loop"] == "plain"
    (row,) = result["results"]
    assert row["workload"] == "packed_128" and row["responses"] >= 8 and 100 < row["tokens"] < 160
    assert row["tokenwire_s"] > 0 and row["orjson_loads_s"] > 0 and row["warm_tokenwire_s"] > 0
    assert row["tokenwire_faults_per_parse"] >= 0
    assert "[1/1] packed_128" in out.stderr


def test_bench_command_samples_json():
    out = subprocess.run(
        [sys.executable, "-m", "tokenwire", "bench", "--quick", "--json", "--samples"],
        capture_output=True, text=True, check=True,
    )
    result = json.loads(out.stdout)
    assert result["loop"] == "samples"
    rows = {row["workload"]: row for row in result["results"]}
    assert rows["multi_choice"]["tokens"] == 4096 and rows["multi_choice"]["tokenwire_s"] > 0


def test_bench_command_rejects_unknown_workload():
    out = subprocess.run([sys.executable, "-m", "tokenwire", "bench", "--workload", "nope"], capture_output=True, text=True)
    assert out.returncode == 2 and "invalid choice" in out.stderr and "Traceback" not in out.stderr
