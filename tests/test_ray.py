"""``tokenwire check --ray`` and ``tokenwire.ray.check``: a local Ray cluster on the loopback
interface gives the summary and the ``--records`` rows one machine gives (skipped without
ray, pyarrow or zstandard)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap

import pytest

import tokenwire.ray
from tokenwire.auditing import _check
from tokenwire.base import _json

from .test_cli import check
from .test_records import planted

_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray socket on 127.0.0.1
    import ray
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
    import tokenwire.ray
    from tokenwire import cli
    paths, out = json.loads(sys.argv[1]), sys.argv[2]
    summary = tokenwire.ray.check(paths, address="auto", field="response", records=f"{out}/api.parquet",
                                  columns=["step", "worker"], range_bytes=2048)
    with open(f"{out}/api.json", "w") as f:
        json.dump(summary, f)
    status = cli.main(["check", *paths, "--field", "response", "--ray", "auto", "--report", "json",
                       "--records", f"{out}/cli.parquet", "--column", "step", "--column", "worker"])
    ray.shutdown()
    sys.exit(status)
    """
)


def _comparable(summary: dict) -> dict:
    return {key: value for key, value in summary.items() if key != "seconds"}


def test_ray_matches_one_machine(tmp_path, capsys):
    pytest.importorskip("ray")
    pq = pytest.importorskip("pyarrow.parquet")
    zstandard = pytest.importorskip("zstandard")
    records, _ = planted()
    data = b"".join(r + b"\n" for r in records)
    third = len(records) // 3
    paths = [str(tmp_path / name) for name in ("a.jsonl.gz", "b.jsonl.zst", "c.jsonl", "d.json")]
    with gzip.open(paths[0], "wb") as f:
        f.write(b"".join(r + b"\n" for r in records[:third]))
    (tmp_path / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    (tmp_path / "c.jsonl").write_bytes(b"\n" + data[: len(data) // 2] + b"\n" + data)  # ranges of lines
    (tmp_path / "d.json").write_bytes(b"[" + b",".join(_json.dumps(_json.loads(r)) for r in records[:5]) + b"]")
    status, out, _ = check(capsys, *paths, "--field", "response", "--report", "json",
                           "--records", str(tmp_path / "one.parquet"), "--column", "step", "--column", "worker")
    one = json.loads(out)
    assert status == 1 and one["records"] > len(records)  # c.jsonl's middle line is cut: malformed JSON
    ran = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(paths), str(tmp_path)],
                         capture_output=True, text=True, timeout=240)
    assert ran.returncode == status, ran.stderr[-3000:]
    on_ray = json.loads(ran.stdout)
    api = json.loads((tmp_path / "api.json").read_text())
    assert _comparable(on_ray) == _comparable(one)
    assert _comparable(api) == _comparable(one)
    rows = pq.read_table(tmp_path / "one.parquet").to_pylist()
    assert len(rows) == one["records"]
    assert pq.read_table(tmp_path / "cli.parquet").to_pylist() == rows
    assert pq.read_table(tmp_path / "api.parquet").to_pylist() == rows


def test_line_ranges(tmp_path):
    lines = [b"", b"{}", b"x" * 50, b"", b"[1]", b"y" * 5]
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    source = tokenwire.auditing._capture.Source(str(path), "r.jsonl", path.stat().st_size)
    for step in (1, 3, 7, 64):
        units = tokenwire.ray._units([source], "jsonl", step)
        got = b""
        for unit in units:
            reader = tokenwire.ray._Range(unit)
            while block := reader.read(5):
                got += block
            reader.close()
        assert got == path.read_bytes(), step


def test_local_cluster_stays_on_loopback(monkeypatch, tmp_path):
    calls = []

    class FakeRay:
        @staticmethod
        def is_initialized():
            return False

        @staticmethod
        def init(**kw):
            calls.append(kw)

    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    monkeypatch.setattr(tokenwire.ray, "_require", lambda *a: (_ for _ in ()).throw(RuntimeError("stop")))
    with pytest.raises(RuntimeError, match="stop"):
        tokenwire.ray.run([str(tmp_path)], _check.Options(), address="local")
    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    assert tokenwire.ray._connect(FakeRay, "local") is True
    assert tokenwire.ray._connect(FakeRay, "ray://head:10001") is True
    assert calls[0]["include_dashboard"] is False and "address" not in calls[0]
    assert calls[1]["address"] == "ray://head:10001"


def test_ray_missing(tmp_path, capsys, monkeypatch):
    (tmp_path / "a.jsonl").write_bytes(b"{}\n")
    monkeypatch.setitem(sys.modules, "ray", None)
    status, out, err = check(capsys, str(tmp_path / "a.jsonl"), "--ray", "local")
    assert status == 2 and out == ""
    assert "pip install 'tokenwire[ray]'" in err and "Traceback" not in err


def test_no_cluster_to_join(tmp_path, capsys, monkeypatch):
    (tmp_path / "a.jsonl").write_bytes(b"{}\n")

    def refuse(ray, address):
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(tokenwire.ray, "_require", lambda *a: object())
    monkeypatch.setattr(tokenwire.ray, "_connect", refuse)
    status, out, err = check(capsys, str(tmp_path / "a.jsonl"), "--ray", "auto", "--records", str(tmp_path / "v.jsonl"))
    assert status == 2 and out == ""
    assert err.startswith("tokenwire check: error: --ray auto: Could not find any running Ray instance")
    assert not (tmp_path / "v.jsonl").exists()  # no rows file is left behind


def test_standard_input_is_not_for_ray(capsys, monkeypatch):
    monkeypatch.setattr(tokenwire.ray, "_require", lambda *a: object())
    status, out, err = check(capsys, "-", "--ray", "auto")
    assert out == ""
    assert status == 2 and "standard input cannot be checked on Ray" in err


_OVERSIZED = textwrap.dedent(
    """
    import json, os, sys
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    import tokenwire.ray
    from tokenwire.auditing._check import Options, json_report
    path, limit = sys.argv[1], int(sys.argv[2])
    rows = []
    options = Options(examples=50, records=True, max_record=limit)
    tally = tokenwire.ray.run([path], options, address="auto", sink=rows.extend, range_bytes=1 << 20)
    ray.shutdown()
    print(json.dumps({"report": json_report(tally), "lines": [row["line"] for row in rows]}))
    """
)


def test_ray_line_numbers_after_an_oversized_record(tmp_path):
    """A line over the record limit is counted as a line: the lines after it, in later
    ranges, are numbered as on one machine."""
    pytest.importorskip("ray")
    from .test_cli import _packed, line_of, m_native_lost_eos

    limit = tokenwire.auditing._capture.BLOCK  # the least limit the reader takes
    good, bad = line_of(_packed()), line_of(m_native_lost_eos()[0])
    records = [good, bad, b'{"pad": "' + b"x" * (limit + 4096) + b'"}'] + [good, bad] * 20
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"".join(r + b"\n" for r in records))
    rows: list = []
    options = _check.Options(examples=50, records=True, max_record=limit)
    one = _check.json_report(_check.run([str(path)], options, sink=rows.extend))
    assert one["classes"]["too_large"]["count"] == 1
    assert [row["line"] for row in rows] == list(range(1, len(records) + 1))
    ran = subprocess.run([sys.executable, "-c", _OVERSIZED, str(path), str(limit)],
                         capture_output=True, text=True, timeout=240)
    assert ran.returncode == 0, ran.stderr[-3000:]
    on_ray = json.loads(ran.stdout)
    assert on_ray["lines"] == list(range(1, len(records) + 1))
    shown = [e["line"] for e in on_ray["report"]["classes"]["length_mismatch"]["examples"]]
    assert shown == [e["line"] for e in one["classes"]["length_mismatch"]["examples"]] == [2, *range(5, 44, 2)]
    assert _comparable(on_ray["report"]) == _comparable(one)
