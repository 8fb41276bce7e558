"""The command line: ``tokenwire check`` (every defect class, containers, jobs, reports, errors),
``tokenwire inspect`` and the bench progress."""

from __future__ import annotations

import base64
import copy
import gzip
import io
import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from tokenwire import __main__ as cli
from tokenwire import _cli_check, _cli_io, samples

N = 12  # tokens per choice: small responses keep the suite fast


def _native(support: bool = False, m: int = 4) -> dict[str, Any]:
    ev = samples.evidence(N, m, seed=3, support=support)
    return samples.response([samples.build_choice(ev, transport="native", mask="list" if support else None)], prompt_tokens=4)


def _packed(**kw: Any) -> dict[str, Any]:
    ev = samples.evidence(N, 0, seed=4)
    return samples.response([samples.build_choice(ev, transport="packed", **kw)], prompt_tokens=4)


def _compact(mask: str | None = None) -> dict[str, Any]:
    ev = samples.evidence(N, 3, seed=5, support=mask is not None)
    return samples.response([samples.build_choice(ev, transport="compact", mask=mask)], prompt_tokens=4)


def _choice(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["choices"][0]


def _packed_values(choice: dict[str, Any], values: np.ndarray) -> None:
    choice["completion_logprobs"].update(
        data=base64.b64encode(values.astype("<f4").tobytes()).decode(), shape=[len(values)]
    )


def _compact_rows(choice: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    raw = base64.b64decode(choice["compact_logprobs"]["data"])
    half = len(raw) // 2
    return np.frombuffer(raw[:half], "<u4").copy(), np.frombuffer(raw[half:], "<f4").copy()


def _set_compact_rows(choice: dict[str, Any], ids: np.ndarray, values: np.ndarray) -> None:
    choice["compact_logprobs"]["data"] = base64.b64encode(ids.tobytes() + values.tobytes()).decode()


# --- mutations: each returns (serialized record, defect class) --------------------------------------


def m_native_lost_eos():
    doc = _native()
    _choice(doc)["token_ids"].pop()  # re-tokenized completion that lost its trailing EOS
    return doc, "length_mismatch"


def m_packed_extra_value():
    doc = _packed()
    choice = _choice(doc)
    values = np.frombuffer(base64.b64decode(choice["completion_logprobs"]["data"]), "<f4")
    _packed_values(choice, np.append(values, np.float32(-0.5)))
    return doc, "length_mismatch"


def m_mask_extra_row():
    doc = _native(support=True)
    _choice(doc)["sampling_mask"].append([1])
    return doc, "length_mismatch"


def m_compact_lost_eos():
    doc = _compact()
    _choice(doc)["token_ids"].pop()
    return doc, "length_mismatch"


def m_native_sentinel():
    doc = _native()
    _choice(doc)["logprobs"]["content"][3]["logprob"] = -9999.0
    return doc, "bad_logprob"


def m_native_null_logprob():
    doc = _native()
    _choice(doc)["logprobs"]["content"][2]["logprob"] = None
    return doc, "bad_logprob"


def m_packed_nan():
    doc = _packed()
    choice = _choice(doc)
    values = np.frombuffer(base64.b64decode(choice["completion_logprobs"]["data"]), "<f4").copy()
    values[4] = np.nan
    _packed_values(choice, values)
    return doc, "bad_logprob"


def m_compact_sampled_sentinel():
    doc = _compact()
    ids, values = _compact_rows(_choice(doc))
    values[4 * 5] = -9999.0  # row 5 starts with the sampled token
    _set_compact_rows(_choice(doc), ids, values)
    return doc, "bad_logprob"


def m_native_wrong_id():
    doc = _native()
    _choice(doc)["logprobs"]["content"][5]["token"] = "token_id:1"
    return doc, "id_mismatch"


def m_compact_wrong_id():
    doc = _compact()
    _choice(doc)["token_ids"][3] = 151_935 - _choice(doc)["token_ids"][3] % 7  # in no row
    return doc, "id_mismatch"


def m_no_token_ids():
    doc = _packed()
    del _choice(doc)["token_ids"]
    return doc, "missing_ids"


def m_negative_token_id():
    doc = _native()
    _choice(doc)["token_ids"][0] = -1
    return doc, "missing_ids"


def m_support_without_sampled():
    doc = _compact(mask="list")
    row = _choice(doc)["sampling_mask"][2]
    sampled = _choice(doc)["token_ids"][2]
    _choice(doc)["sampling_mask"][2] = [i for i in row if i != sampled] or [sampled + 1]
    return doc, "head"


def m_bad_base64():
    doc = _packed()
    data = _choice(doc)["completion_logprobs"]["data"]
    _choice(doc)["completion_logprobs"]["data"] = "!" + data[1:]
    return doc, "malformed_packed"


def m_routed_shape():
    routed = samples.routing(N + 3, layers=2, topk=2, experts=8)
    doc = _packed(routed=routed)
    _choice(doc)["routed_experts"]["shape"] = [N + 4, 2, 2]
    return doc, "malformed_packed"


def m_compact_format():
    doc = _compact()
    _choice(doc)["compact_logprobs"]["format"] = "u16"
    return doc, "malformed_packed"


def m_chat_chunk():
    chunk = {"index": 0, "delta": {"content": "hi"}}
    return {"id": "c", "object": "chat.completion.chunk", "choices": [chunk]}, "unrecognized"


def m_no_choices():
    doc = _packed()
    doc["choices"] = []
    return doc, "other"


MUTATIONS = [v for k, v in sorted(globals().items()) if k.startswith("m_")]


def line_of(doc: Any) -> bytes:
    return samples.dumps(doc)


def write(path, records: list[bytes], *, gz: bool = False) -> str:
    data = b"".join(r + b"\n" for r in records)
    with (gzip.open if gz else open)(path, "wb") as f:
        f.write(data)
    return str(path)


def check(capsys, *args: str) -> tuple[int, str, str]:
    status = cli.main(["check", *args])
    out, err = capsys.readouterr()
    return status, out, err


def report(capsys, *args: str) -> tuple[int, dict[str, Any]]:
    status, out, _ = check(capsys, *args, "--report", "json")
    return status, json.loads(out)


def counts(result: dict[str, Any]) -> dict[str, int]:
    return {cls: entry["count"] for cls, entry in result["classes"].items() if entry["count"]}


# --- defect classes ------------------------------------------------------------------------------


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda f: f.__name__[2:])
def test_every_defect_class(tmp_path, capsys, mutation):
    doc, expected = mutation()
    path = write(tmp_path / "one.jsonl", [line_of(_packed()), line_of(doc)])
    status, result = report(capsys, path)
    assert status == 1
    assert counts(result) == {expected: 1}
    (example,) = result["classes"][expected]["examples"]
    assert example["file"] == path and example["line"] == 2
    assert result["records"] == 2 and result["clean"] == 1
    if mutation is m_chat_chunk:
        assert example["reason"].startswith("looks like an OpenAI chat completion chunk")
        assert "supported formats: generate (vLLM /inference/v1/generate), completions (" in example["reason"]


def test_malformed_json_and_head_with_top_k(tmp_path, capsys):
    records = [line_of(_packed())[:-7], line_of(_native(m=4))]
    status, result = report(capsys, write(tmp_path / "x.jsonl", records), "--top-k", "6")
    assert status == 1
    assert counts(result) == {"malformed_json": 1, "head": 1}
    head = result["classes"]["head"]["examples"][0]
    assert head["location"] == "choices[0].logprobs.content[0]"
    assert "fewer top logprobs" in head["reason"]


def test_length_histogram_and_locations(tmp_path, capsys):
    lost = [line_of(m_native_lost_eos()[0]) for _ in range(5)]
    extra = copy.deepcopy(_native())
    extra["choices"][0]["token_ids"] += [1, 2]
    records = [*lost, line_of(extra), line_of(m_packed_extra_value()[0])]
    path = write(tmp_path / "len.jsonl", records)
    status, result = report(capsys, path)
    assert status == 1
    assert result["classes"]["length_mismatch"]["histogram"] == {
        "completion_logprobs": {"+1": 1},
        "logprobs.content": {"+1": 5, "-2": 1},
    }
    status, out, _ = check(capsys, path)
    assert "logprobs.content count minus token_ids count: +1 on 5/6, -2 on 1/6" in out
    assert f"{path}:1  [length mismatch]  choices[0].logprobs.content: " in out


def test_clean_file(tmp_path, capsys):
    path = write(tmp_path / "ok.jsonl", [line_of(_packed()), line_of(_native()), line_of(_compact("csr"))])
    status, out, err = check(capsys, path)
    assert status == 0 and "clean: no defects found" in out and "checked 3 records" in out
    assert err == ""
    heads = write(tmp_path / "heads.jsonl", [line_of(_native()), line_of(_compact("csr"))])
    assert check(capsys, heads, "--top-k", "2")[0] == 0


def test_both_implementations_classify_alike(tmp_path):
    path = write(tmp_path / "all.jsonl", [line_of(m()[0]) for m in MUTATIONS])
    results = []
    for switch in ("0", "1"):
        out = subprocess.run(
            [sys.executable, "-m", "tokenwire", "check", path, "--report", "json", "--examples", "20"],
            env={**os.environ, "TOKENWIRE_NO_EXTENSIONS": switch}, capture_output=True, text=True,
        )
        assert out.returncode == 1, out.stderr
        results.append(json.loads(out.stdout))
    assert results[1]["implementation"] == "python"
    assert results[0]["classes"] == results[1]["classes"]
    assert results[0]["defective"] == len(MUTATIONS)


# --- containers ----------------------------------------------------------------------------------


def test_field_paths(tmp_path, capsys):
    good = _packed()
    bad, _ = m_native_sentinel()
    records = [
        json.dumps({"meta": {"step": 1}, "capture": {"response": good}}).encode(),
        json.dumps({"capture": {"response": bad}}).encode(),
        json.dumps({"capture": {"response": samples.dumps(good).decode()}}).encode(),  # a string body
        json.dumps({"capture": [good]}).encode(),
        b"{not json",
    ]
    path = write(tmp_path / "wrapped.jsonl", records)
    status, result = report(capsys, path, "--field", "capture.response")
    assert status == 1
    assert counts(result) == {"bad_logprob": 1, "unrecognized": 1, "malformed_json": 1}
    assert result["classes"]["bad_logprob"]["examples"][0]["location"] == "capture.response.choices[0].logprobs.content[3]"
    assert "no field 'capture.response'" in result["classes"]["unrecognized"]["examples"][0]["reason"]
    status, result = report(capsys, path, "--field", "capture.0")
    assert counts(result)["unrecognized"] == 3 and result["clean"] == 1


def test_gzip_by_magic_bytes(tmp_path, capsys):
    records = [line_of(_packed()), line_of(m_native_wrong_id()[0])]
    plain = write(tmp_path / "p.jsonl", records)
    packed = write(tmp_path / "p.jsonl.gz", records, gz=True)
    unnamed = write(tmp_path / "capture.bin", records, gz=True)
    expected = report(capsys, plain)[1]
    for path in (packed, unnamed):
        status, result = report(capsys, path)
        assert status == 1 and counts(result) == counts(expected) == {"id_mismatch": 1}
        assert result["bytes"] == expected["bytes"]


def test_json_documents(tmp_path, capsys):
    pretty = tmp_path / "one.json"
    pretty.write_text(json.dumps(m_native_sentinel()[0], indent=2))
    array = tmp_path / "many.json"
    array.write_text(json.dumps([_packed(), m_no_token_ids()[0], _native()]))
    status, result = report(capsys, str(pretty), str(array))
    assert status == 1 and result["records"] == 4
    assert counts(result) == {"bad_logprob": 1, "missing_ids": 1}
    assert result["classes"]["missing_ids"]["examples"][0]["element"] == 2
    assert "line" not in result["classes"]["bad_logprob"]["examples"][0]


def test_directories_and_stdin(tmp_path, capsys):
    (tmp_path / "d" / "e").mkdir(parents=True)
    write(tmp_path / "d" / "a.jsonl", [line_of(_packed())])
    write(tmp_path / "d" / "e" / "b.jsonl.gz", [line_of(m_no_choices()[0])], gz=True)
    (tmp_path / "d" / "notes.txt").write_text("not a capture")
    status, result = report(capsys, str(tmp_path / "d"))
    assert status == 1 and result["records"] == 2 and [f["records"] for f in result["files"]] == [1, 1]
    data = gzip.compress(line_of(_packed()) + b"\n")
    out = subprocess.run([sys.executable, "-m", "tokenwire", "check", "-"], input=data, capture_output=True)
    assert out.returncode == 0 and b"checked 1 records" in out.stdout


def test_jobs_and_chunking_match_one_process(tmp_path, capsys, monkeypatch):
    records, defective = [], []
    for i in range(40):
        if i == 7:
            records.append(b"")  # blank lines are skipped but keep the numbering
        if i % 3:
            records.append(line_of(MUTATIONS[i % len(MUTATIONS)]()[0]))
            defective.append(len(records))
        else:
            records.append(line_of(_packed()))
    path = write(tmp_path / "mixed.jsonl", records)
    single = report(capsys, path, "--examples", "50")[1]
    monkeypatch.setattr(_cli_io, "BLOCK", 1000)  # many chunks; most lines span several blocks
    chunked = report(capsys, path, "--examples", "50")[1]
    parallel = report(capsys, path, "--jobs", "2", "--examples", "50")[1]
    assert single["records"] == 40 and single["defective"] == len(defective)
    for result in (chunked, parallel):
        assert result["classes"] == single["classes"]
        assert result["records"] == 40 and result["bytes"] == single["bytes"]
    lines = [e["line"] for entry in parallel["classes"].values() for e in entry["examples"]]
    assert sorted(lines) == defective


# --- reports, empty and unreadable input, arguments ----------------------------------------------


def test_json_report_schema(tmp_path, capsys):
    path = write(tmp_path / "r.jsonl", [line_of(_packed())])
    status, result = report(capsys, path)
    assert status == 0 and result["status"] == 0 and result["errors"] == []
    assert list(result["classes"]) == list(_cli_check.CLASSES)
    assert result["files"] == [{"path": path, "bytes": os.path.getsize(path), "records": 1, "defective": 0}]
    assert result["formats"] == {"generate": 1} and result["format"] == "auto"


def test_empty_input(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    blank = write(tmp_path / "blank.jsonl.gz", [b"", b"  "], gz=True)
    status, out, err = check(capsys, str(empty), blank)
    assert status == 0 and "no records found" in out and "warning: no records found" in err


def test_unreadable_and_damaged_files(tmp_path, capsys):
    status, out, err = check(capsys, str(tmp_path / "missing.jsonl"))
    assert status == 2 and out == "" and "missing.jsonl: cannot read: No such file or directory" in err
    (tmp_path / "empty_dir").mkdir()
    status, _, err = check(capsys, str(tmp_path / "empty_dir"))
    assert status == 2 and "holds no .json" in err
    whole = gzip.compress(b"".join(line_of(_packed()) + b"\n" for _ in range(50)))
    (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    good = write(tmp_path / "good.jsonl", [line_of(_native())])
    status, result = report(capsys, str(tmp_path / "cut.jsonl.gz"), good)
    assert status == 2 and result["status"] == 2 and result["records"] >= 1
    assert "cut.jsonl.gz: damaged gzip stream" in result["errors"][0]
    assert result["files"][1]["records"] == 1  # the run went on with the next file


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check"], "the following arguments are required: PATH"),
        (["check", "x.jsonl", "--top-k", "0"], "argument --top-k: expected a positive integer, got 0"),
        (["check", "x.jsonl", "--jobs", "two"], "argument --jobs/-j: expected a number of processes, got 'two'"),
        (["check", "x.jsonl", "--format", "openai"], "argument --format: invalid choice: 'openai'"),
        (["check", "x.jsonl", "--report", "xml"], "argument --report: invalid choice: 'xml'"),
        (["inspect"], "the following arguments are required: FILE"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_arguments(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_errors_without_traceback(tmp_path, capsys):
    path = write(tmp_path / "x.jsonl", [line_of(_packed())])
    out = subprocess.run([sys.executable, "-m", "tokenwire", "check", str(tmp_path / "nope.jsonl")],
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("tokenwire check: error: ") and "Traceback" not in out.stderr
    # In process: main() returns 2 with a message instead of raising.
    assert cli.main(["check", path, "--field", "a..b"]) == 2
    assert "--field 'a..b': empty path component" in capsys.readouterr().err
    assert cli.main(["inspect", path, "--field", "a."]) == 2
    assert "--field 'a.': empty path component" in capsys.readouterr().err
    assert cli.main(["inspect", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["check", path, "--jobs", "-1"])
    assert exit_info.value.code == 2 and "expected 0 (every core) or more" in capsys.readouterr().err


def test_progress_lines():
    stream = io.StringIO()
    meter = _cli_check.Progress(True, total=4_000_000, stream=stream)
    meter.last -= 10
    meter.started -= 10
    meter.update(1_000_000, 500)
    text = stream.getvalue()
    assert text.startswith("1.0 MB / 4.0 MB (25%), 500 records, ") and "records/s" in text
    assert text.rstrip().endswith(", ETA 30s")  # 3 MB left at 0.1 MB/s
    quiet = io.StringIO()
    _cli_check.Progress(False, total=None, stream=quiet).update(1, 1)
    assert quiet.getvalue() == ""


# --- inspect -------------------------------------------------------------------------------------


def test_inspect_valid_response(tmp_path, capsys):
    routed = samples.routing(N + 3, layers=2, topk=2, experts=8)
    path = write(tmp_path / "i.jsonl.gz", [line_of(_packed(routed=routed, routed_start=3))], gz=True)
    assert cli.main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert f"{path}:1: " in out and "format generate" in out and "\nvalid\n" in out
    assert "completion_logprobs float32 (12,)" in out
    assert "routed_experts uint8 (15, 2, 2), start 3" in out
    assert "1 choice, 12 completion tokens" in out


def test_inspect_json_heads_line_and_defects(tmp_path, capsys):
    records = [line_of(_compact("csr")), line_of(m_native_lost_eos()[0])]
    path = write(tmp_path / "i.jsonl", records)
    assert cli.main(["inspect", path, "--top-k", "2", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["valid"] and info["tokens"] == N and info["line"] == 1
    fields = {f["field"]: f for f in info["choices"][0]["fields"]}
    assert fields["compact_logprobs"]["decoded"][0] == "completion_logprobs float32 (12,)"
    assert any(d.startswith("completion_top_ids Ragged: 12 rows") for d in fields["compact_logprobs"]["decoded"])
    assert fields["sampling_mask"]["decoded"][0].startswith("sampling_mask Ragged: 12 rows")
    assert cli.main(["inspect", path, "--line", "2"]) == 1
    out = capsys.readouterr().out
    assert "invalid [length mismatch]: choices[0].logprobs.content: " in out
    assert cli.main(["inspect", path, "--line", "9"]) == 2
    assert "no record on line 9" in capsys.readouterr().err


def test_inspect_field(tmp_path, capsys):
    path = write(tmp_path / "w.jsonl", [json.dumps({"r": _native()}).encode()])
    assert cli.main(["inspect", path, "--field", "r"]) == 0
    assert "completion_logprobs float64 (12,)" in capsys.readouterr().out
    assert cli.main(["inspect", path, "--field", "q"]) == 2
    assert "no field 'q'" in capsys.readouterr().err


# --- bench ---------------------------------------------------------------------------------------


def test_bench_reports_progress_on_long_runs(capsys, monkeypatch):
    monkeypatch.setattr(cli, "_median_seconds", lambda fn, budget: 1e-3)
    rows = cli.bench(quick=True, names=["multi_choice"] * 4)  # ~2.4 s when timed
    assert len(rows) == 4
    assert capsys.readouterr().err.count("multi_choice ...") == 4
    cli.bench(quick=True, names=["multi_choice"])  # ~0.6 s: quiet
    assert capsys.readouterr().err == ""



def _openai_docs():
    """One clean response of each OpenAI-compatible and SGLang shape (from the parsers' own
    strategies), each with its format's name."""
    from .openai_strategies import FORMATS, evidence

    ev = [evidence([10, 20, 30], [-1.0, -2.0, -0.5])]

    def name(f: Any) -> str:
        return "sglang" if f.name.startswith("sglang") else "chat" if "chat" in f.name else "completions"

    return [(f.build(ev), name(f)) for f in FORMATS]


def test_openai_compatible_and_sglang_formats(tmp_path, capsys):
    docs = _openai_docs()
    path = write(tmp_path / "mixed.jsonl", [line_of(doc) for doc, _ in docs] + [line_of(_packed())])
    status, result = report(capsys, path)
    assert status == 0 and result["clean"] == len(docs) + 1
    expected: dict[str, int] = {"generate": 1}
    for _, name in docs:
        expected[name] = expected.get(name, 0) + 1
    assert result["formats"] == expected
    # Forced: every other record is a defect of that format.
    status, result = report(capsys, path, "--format", "sglang")
    assert status == 1 and result["formats"]["sglang"] == len(docs) + 1
    assert result["clean"] == sum(name == "sglang" for _, name in docs)


def test_openai_compatible_defects(tmp_path, capsys):
    """A shifted logprob list, a usage count that disagrees, missing ids, a null logprob and a
    bad head candidate land in their classes, with the histogram of the shift."""
    (comp, _), (chat, _) = _openai_docs()[1], _openai_docs()[3]
    shifted = copy.deepcopy(comp)
    shifted["choices"][0]["logprobs"]["token_logprobs"].append(-1.0)
    shifted["choices"][0]["logprobs"]["tokens"].append("token_id:40")
    usage = copy.deepcopy(comp)
    usage["usage"]["completion_tokens"] = 4
    no_ids = copy.deepcopy(chat)
    del no_ids["choices"][0]["token_ids"]
    for entry in no_ids["choices"][0]["logprobs"]["content"]:
        entry["token"] = " w"
    null = copy.deepcopy(chat)
    null["choices"][0]["logprobs"]["content"][1]["logprob"] = None
    docs = [shifted, usage, no_ids, null]
    status, result = report(capsys, write(tmp_path / "bad.jsonl", [line_of(d) for d in docs]))
    assert status == 1
    assert counts(result) == {"length_mismatch": 2, "missing_ids": 1, "bad_logprob": 1}
    histogram = result["classes"]["length_mismatch"]["histogram"]
    assert histogram == {"logprobs.token_logprobs": {"+1": 1}, "usage.completion_tokens": {"+1": 1}}
    assert result["formats"] == {"completions": 2, "chat": 2}
