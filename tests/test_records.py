"""``tokenwire.audit`` and ``tokenwire check --records``: one verdict per record, queried with
DuckDB (skipped without pyarrow or duckdb)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

import tokenwire
from tokenwire.base import _json
from tokenwire import samples

from .test_cli import MUTATIONS, _native, _packed, check, line_of, m_native_lost_eos, write

_CLASS_OF = {m.__name__: m()[1] for m in MUTATIONS}


def planted(seed_lines: int = 3, oversized: int = 0) -> tuple[list[bytes], Counter]:
    """Clean records and, mutation ``i`` planted ``i % 3 + 1`` times, defects of every class;
    each record carries the metadata a trainer's capture does. ``oversized``: the size of one
    more record, padded past the reader's limit (0: none)."""
    records, expected = [], Counter()
    step = 0

    def add(doc, cls=None, raw=None):
        nonlocal step
        step += 1
        record = {"step": step, "worker": f"w{step % 4}", "response": doc}
        records.append(raw if raw is not None else _json.dumps(record))
        if cls is not None:
            expected[cls] += 1

    for _ in range(seed_lines):
        add(_packed())
        add(_native())
    for i, mutation in enumerate(MUTATIONS):
        for _ in range(i % 3 + 1):
            doc, cls = mutation()
            add(doc, cls)
    for _ in range(2):
        add(None, "malformed_json", raw=b'{"step": 99, "response": {"choices": [')
    if oversized:
        add(None, "too_large", raw=_json.dumps({"step": 100, "response": _packed(), "pad": "x" * oversized}))
    return records, expected


def test_audit_verdicts():
    ok = tokenwire.audit(samples.sample("multi_choice"), top_k=4)
    assert ok.valid and ok.format == "generate" and ok.defect is None
    assert (ok.choices, ok.tokens, ok.request_id) == (4, 4096, "gen-0")
    doc, _ = m_native_lost_eos()
    bad = tokenwire.audit(json.dumps({"r": doc}), field="r")
    assert not bad.valid and bad.defect == "length_mismatch" and bad.label == "length mismatch"
    assert (bad.choice, bad.field, bad.token) == (0, "logprobs.content", None)
    assert bad.location == "r.choices[0].logprobs.content"
    assert (bad.length_field, bad.length_difference) == ("logprobs.content", 1)
    assert "does not match logprob count" in bad.message and bad.request_id == "gen-0"
    for mutation in MUTATIONS:
        doc, cls = mutation()
        assert tokenwire.audit(line_of(doc)).defect == cls, mutation.__name__
    assert tokenwire.audit(b"[1").defect == "malformed_json"
    with pytest.raises(ValueError, match="format must be"):
        tokenwire.audit(b"{}", format="grpc")


def test_records_jsonl(tmp_path, capsys):
    records, expected = planted()
    path = write(tmp_path / "capture.jsonl", records)
    out = tmp_path / "verdicts.jsonl"
    status, _, _ = check(capsys, path, "--field", "response", "--records", str(out),
                         "--column", "step", "--column", "host=worker")
    assert status == 1
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(records)
    assert [r["line"] for r in rows] == list(range(1, len(records) + 1))
    assert Counter(r["defect"] for r in rows if r["defect"]) == expected
    assert all(r["valid"] == (r["defect"] is None) for r in rows)
    first = rows[0]
    assert first["file"] == path and first["format"] == "generate" and first["tokens"] == 12
    assert (first["step"], first["host"]) == ("1", "w1")
    assert rows[-1]["step"] is None and rows[-1]["defect"] == "malformed_json"


def test_records_parquet_with_duckdb(tmp_path, capsys, monkeypatch):
    pytest.importorskip("pyarrow")
    duckdb = pytest.importorskip("duckdb")
    # The reader holds no record over MAX_RECORD (1 GiB); at its least (one block) a record
    # of a few MiB plants the too_large class.
    monkeypatch.setattr(tokenwire.auditing._capture, "MAX_RECORD", tokenwire.auditing._capture.BLOCK)
    records, expected = planted(oversized=tokenwire.auditing._capture.BLOCK + 1024)
    assert set(expected) == set(tokenwire.auditing._audit.CLASSES)  # every class is planted
    path = write(tmp_path / "capture.jsonl.gz", records, gz=True)
    out = tmp_path / "verdicts.parquet"
    status, report_out, _ = check(capsys, path, "--field", "response", "--records", str(out),
                                  "--column", "step", "--column", "worker", "--report", "json")
    assert status == 1
    summary = json.loads(report_out)
    con = duckdb.connect()
    per_class = dict(con.execute(
        f"SELECT defect, count(*) FROM '{out}' WHERE NOT valid GROUP BY defect"
    ).fetchall())
    assert per_class == dict(expected)
    assert per_class == {cls: e["count"] for cls, e in summary["classes"].items() if e["count"]}
    shifts = con.execute(
        f"SELECT worker, length_field, length_difference, count(*) FROM '{out}' "
        "WHERE defect = 'length_mismatch' GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    assert sum(n for *_, n in shifts) == expected["length_mismatch"]
    assert all(diff is not None for _, _, diff, _ in shifts)
    (total, clean, tokens) = con.execute(
        f"SELECT count(*), count(*) FILTER (valid), sum(tokens) FROM '{out}'"
    ).fetchone()
    assert (total, clean) == (summary["records"], summary["clean"]) and tokens == 12 * clean


def test_records_same_for_any_jobs(tmp_path, capsys, monkeypatch):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    monkeypatch.setattr(tokenwire.auditing._capture, "BLOCK", 4096)  # many chunks
    records, _ = planted()
    path = write(tmp_path / "capture.jsonl", records)
    tables = []
    for jobs in ("1", "2"):
        out = tmp_path / f"v{jobs}.parquet"
        check(capsys, path, "--field", "response", "--records", str(out), "--jobs", jobs)
        tables.append(pq.read_table(out).to_pylist())
    assert tables[0] == tables[1] and len(tables[0]) == len(records)


def test_records_errors(tmp_path, capsys):
    path = write(tmp_path / "x.jsonl", [line_of(_packed())])
    status, _, err = check(capsys, path, "--records", str(tmp_path / "out.csv"))
    assert status == 2 and "name a .parquet, .jsonl or .ndjson file" in err
    status, _, err = check(capsys, path, "--records", str(tmp_path / "o.jsonl"), "--column", "model")
    assert status == 2 and "column 'model' already exists" in err
    status, _, err = check(capsys, path, "--column", "step")
    assert status == 2 and "give --records OUT too" in err
    status, _, err = check(capsys, path, "--records", str(tmp_path / "o.jsonl"), "--column", "x=")
    assert status == 2 and "empty path" in err
    status, _, err = check(capsys, path, "--records", str(tmp_path / "no" / "o.jsonl"))
    assert status == 2 and "cannot write" in err


def test_row_columns_follow_the_schema():
    from tokenwire.auditing._records import COLUMNS, record_row

    row = record_row(2, b"{}", None, None, {}, {"file": "f", "line": 1}, (("step", ("step",)),))
    assert list(row) == [*COLUMNS, "step"]
    unheld = record_row(5, None, None, None, {}, {"file": "f", "line": 2}, (("step", ("step",)),))
    assert unheld["bytes"] == 5 and unheld["step"] is None


def test_both_implementations_write_the_same_rows(tmp_path):
    import os
    import subprocess
    import sys

    records, _ = planted(seed_lines=1)
    path = write(tmp_path / "capture.jsonl", records)
    rows = []
    for switch in ("0", "1"):
        out = tmp_path / f"rows{switch}.jsonl"
        ran = subprocess.run(
            [sys.executable, "-m", "tokenwire", "check", path, "--field", "response", "--records", str(out)],
            env={**os.environ, "TOKENWIRE_NO_EXTENSIONS": switch}, capture_output=True, text=True,
        )
        assert ran.returncode == 1, ran.stderr
        rows.append(out.read_text())
    assert rows[0] == rows[1] and rows[0].count("\n") == len(records)
