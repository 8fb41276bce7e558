"""``tokenwire check --records OUT``: OUT is never an input, is written beside itself and put
in place when the run ends (a failed run leaves what was there), and takes any value a
record or a caller puts in a row (integers past int64, floats, lone surrogates, huge
strings) without a traceback, in both writers."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tokenwire.auditing import _check, _records

from .test_cli import _openai_docs, _packed, check, line_of, m_native_lost_eos, report, write

WRITERS = ["verdicts.jsonl", pytest.param("verdicts.parquet", id="parquet")]


def _rows(path) -> list[dict]:
    path = str(path)
    if path.endswith(".parquet"):
        pq = pytest.importorskip("pyarrow.parquet")
        return pq.read_table(path).to_pylist()
    with open(path, "rb") as f:
        return [json.loads(line) for line in f]


def _leftovers(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.startswith("."))


# --- OUT is not an input ---------------------------------------------------------------------------


@pytest.mark.parametrize("out_name", WRITERS)
def test_rows_file_inside_a_checked_directory_is_not_read(tmp_path, capsys, out_name):
    if out_name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    captures = tmp_path / "captures"
    captures.mkdir()
    records = [line_of(_packed()), line_of(m_native_lost_eos()[0])]
    write(captures / "a.jsonl", records)
    out = captures / out_name.replace("verdicts", "z-verdicts")  # listed after a.jsonl
    for _ in range(2):  # the second run finds the first run's rows there
        status, result = report(capsys, str(captures), "--records", str(out))
        assert status == 1 and result["records"] == 2
        assert [f["path"] for f in result["files"]] == [str(captures / "a.jsonl")]
        assert [row["line"] for row in _rows(out)] == [1, 2]
    assert _leftovers(captures) == []


_FEEDS = textwrap.dedent(
    """
    import sys
    from tokenwire import cli
    from tokenwire.auditing import _records
    _records.RecordsWriter.__init__.__defaults__ = ((), 1)  # every row written as it comes
    sys.exit(cli.main(["check", sys.argv[1], "--records", sys.argv[2]]))
    """
)


def test_rows_written_during_the_run_are_not_read_back(tmp_path):
    """Rows flushed while the directory is being read never become records of the run."""
    write(tmp_path / "a.jsonl", [line_of(_packed())] * 50)
    out = tmp_path / "b.jsonl"
    ran = subprocess.run([sys.executable, "-c", _FEEDS, str(tmp_path), str(out)],
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "checked 50 records" in ran.stdout and len(_rows(out)) == 50


@pytest.mark.parametrize("spelling", ["same", "dotted", "hard link"])
def test_rows_file_that_is_an_input_is_refused(tmp_path, capsys, spelling):
    data = b"".join(r + b"\n" for r in [line_of(_packed()), line_of(m_native_lost_eos()[0])])
    path = tmp_path / "capture.jsonl"
    path.write_bytes(data)
    out = str(path)
    if spelling == "dotted":
        out = os.path.join(str(tmp_path), ".", "capture.jsonl")
    elif spelling == "hard link":
        out = str(tmp_path / "link.jsonl")
        os.link(path, out)
    status, stdout, err = check(capsys, str(path), "--records", out)
    assert status == 2 and stdout == ""
    assert err == f"tokenwire check: error: --records {out}: is the input {path}; write the rows to another file\n"
    assert path.read_bytes() == data
    assert _leftovers(tmp_path) == []


# --- a failed run leaves OUT as it was ----------------------------------------------------------


@pytest.mark.parametrize("out_name", WRITERS)
def test_a_failed_run_leaves_the_rows_file_as_it_was(tmp_path, capsys, monkeypatch, out_name):
    if out_name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    path = write(tmp_path / "capture.jsonl", [line_of(_packed())])
    out = tmp_path / out_name
    assert check(capsys, path, "--records", str(out))[0] == 0
    before = out.read_bytes()
    status, _, err = check(capsys, str(tmp_path / "missing.jsonl"), "--records", str(out))
    assert status == 2 and "missing.jsonl: cannot read" in err
    assert out.read_bytes() == before

    def interrupted(chunk, options=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(_check, "check_chunk", interrupted)
    status, _, err = check(capsys, path, "--records", str(out))
    assert status == 130 and "interrupted" in err
    assert out.read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_the_rows_file_gets_the_usual_permissions(tmp_path, capsys):
    path = write(tmp_path / "capture.jsonl", [line_of(_packed())])
    out = tmp_path / "verdicts.jsonl"
    mask = os.umask(0o022)
    try:
        assert check(capsys, path, "--records", str(out))[0] == 0
    finally:
        os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o644


# --- any value in any column ---------------------------------------------------------------------


@pytest.mark.parametrize("out_name", WRITERS)
def test_a_count_past_int64_does_not_sink_the_run(tmp_path, capsys, out_name):
    if out_name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    chat = _openai_docs()[3][0]
    huge = copy.deepcopy(chat)
    huge["usage"]["completion_tokens"] = 2**64 - 1  # orjson reads it as a u64
    path = write(tmp_path / "capture.jsonl", [line_of(huge), line_of(chat)])
    out = tmp_path / out_name
    ran = subprocess.run([sys.executable, "-m", "tokenwire", "check", path, "--records", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 1 and "Traceback" not in ran.stderr, ran.stderr[-2000:]
    rows = _rows(out)
    assert len(rows) == 2 and rows[1]["valid"] and not rows[0]["valid"]
    assert rows[0]["defect"] == "length_mismatch" and rows[0]["length_difference"] == 2**63 - 1
    assert f"is {2**64 - 1} but the completion has 3 token ids" in rows[0]["message"]


INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
HUGE = "x" * (8 << 20)
# What each kind of column makes of an extreme value.
_EXTREMES = {
    "int64": [(2**64 - 1, INT64_MAX), (2**63, INT64_MAX), (INT64_MAX, INT64_MAX), (INT64_MIN, INT64_MIN),
              (-(2**63) - 1, INT64_MIN), (-(10**30), INT64_MIN), (10**5000, INT64_MAX), (-1, -1), (3.0, 3),
              (1e300, INT64_MAX), (1.5, None), (math.nan, None), (math.inf, None), ("12", None), (True, 1),
              (np.uint64(2**64 - 1), INT64_MAX), (np.int32(-7), -7), (None, None)],
    "bool_": [(True, True), (False, False), (None, None), (1, True), (0, False), ("", False),
              (np.bool_(True), True), (np.array([1, 2]), None)],
    "string": [("\ud800 lone", "\\ud800 lone"), ("é🚀", "é🚀"), (HUGE, HUGE), (2**64, str(2**64)), (-1.5, "-1.5"),
               (10**5000, "an integer of 16610 bits"), ("", ""), (None, None)],
}


@pytest.mark.parametrize("out_name", WRITERS)
def test_the_writers_take_extreme_values_in_every_column(tmp_path, out_name):
    if out_name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    columns = (("step", ("step",)),)
    kinds = {**_records.COLUMNS, "step": "string"}
    rows, wanted = [], []
    for name, kind in kinds.items():
        for value, fitted in _EXTREMES[kind]:
            rows.append({name: value})
            wanted.append((name, fitted))
    out = tmp_path / out_name
    writer = _records.RecordsWriter(str(out), columns, group=7)  # several row groups
    writer.write(rows)
    writer.close()
    got = _rows(out)
    assert len(got) == len(rows)
    for row, (name, fitted) in zip(got, wanted):
        assert row[name] == fitted, (name, str(fitted)[:40], str(row[name])[:40])
        assert all(value is None for key, value in row.items() if key != name)
