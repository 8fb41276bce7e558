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
import textwrap
from typing import Any

import numpy as np
import pytest

from tokenwire.auditing import _capture, _check
from tokenwire import cli, samples
from tokenwire.cli import commands as cli_commands

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


def m_native_text_records():
    doc = _native()  # output_mode "text" records (decoded text) in a response that does not say so
    for entry in _choice(doc)["logprobs"]["content"]:
        entry["token"] = "t" + entry["token"][9:]
    return doc, "missing_ids"


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
    monkeypatch.setattr(_capture, "BLOCK", 1000)  # many chunks; most lines span several blocks
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
    assert list(result["classes"]) == list(_check.CLASSES)
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
    assert exit_info.value.code == 2 and "expected 0 (every core) to 1024, got -1" in capsys.readouterr().err


def test_progress_lines():
    stream = io.StringIO()
    meter = _check.Progress(True, total=4_000_000, stream=stream)
    meter.last -= 10
    meter.started -= 10
    meter.update(1_000_000, 500)
    text = stream.getvalue()
    assert text.startswith("1.0 MB / 4.0 MB (25%), 500 records, ") and "records/s" in text
    assert text.rstrip().endswith(", ETA 30s")  # 3 MB left at 0.1 MB/s
    quiet = io.StringIO()
    _check.Progress(False, total=None, stream=quiet).update(1, 1)
    assert quiet.getvalue() == ""


# --- inspect -------------------------------------------------------------------------------------


def test_inspect_valid_response(tmp_path, capsys):
    routed = samples.routing(4 + N - 1 - 3, layers=2, topk=2, experts=8)  # prompt 4 + completion - 1, from 3
    path = write(tmp_path / "i.jsonl.gz", [line_of(_packed(routed=routed, routed_start=3))], gz=True)
    assert cli.main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert f"{path}:1: " in out and "format generate" in out and "\nvalid\n" in out
    assert "completion_logprobs float32 (12,)" in out
    assert "routed_experts uint8 (12, 2, 2), start 3" in out
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
    monkeypatch.setattr(cli_commands, "_median_seconds", lambda fn, budget: 1e-3)
    rows = cli_commands.bench_samples(quick=True, names=["multi_choice"] * 4)  # ~2.4 s when timed
    assert len(rows) == 4
    assert capsys.readouterr().err.count("multi_choice ...") == 4
    cli_commands.bench_samples(quick=True, names=["multi_choice"])  # ~0.6 s: quiet
    assert capsys.readouterr().err == ""


def test_bench_floor_counts_the_bytes_read_and_written():
    """The plain loop's floor: a response's bytes read and its arrays written once, at memcpy's
    rate (a copied byte is one read and one write), every array counted once."""
    import tokenwire
    from tokenwire.cli import bench

    workload = samples.WORKLOADS["compact_top20_4k_mask"]
    raw = workload.responses(1)[0]
    response = workload.parse(tokenwire, raw)
    choice = response.choices[0]
    arrays = [choice.completion_ids, choice.completion_logprobs, choice.sampling_mask_present,
              choice.completion_top_ids.values, choice.completion_top_ids.offsets,
              choice.completion_top_logprobs.values, choice.completion_top_logprobs.offsets,
              choice.sampling_mask.values, choice.sampling_mask.offsets, response.prompt_token_ids]
    unique = {id(a): a.nbytes for a in arrays}
    assert bench.written_bytes(response) == sum(unique.values())
    assert bench.floor_seconds(3000, 1000, 2e9) == 1e-6
    assert bench.memcpy_rate(1 << 20, 3) > 0


def test_bench_table_prints_the_floor(capsys):
    from tokenwire.cli import bench

    row = {"workload": "w", "bytes": 2**20, "tokens": 8, "tokenwire_s": 4e-4, "orjson_loads_s": 8e-4,
           "ratio_to_orjson_loads": 0.5, "tokenwire_faults_per_parse": 0.0, "warm_tokenwire_s": 3e-4,
           "warm_ratio_to_orjson_loads": 0.4, "floor_s": 1e-4, "tokenwire_floors": 4.0,
           "memcpy_bytes_per_s": 12.5e9}
    bench.print_table([row])
    out = capsys.readouterr().out
    assert "floor us" in out and "100.0    4.0x" in out and "12.5 GB/s" in out



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


# --- bounds: workers, non-regular files, record sizes, one verdict --------------------------------


def test_jobs_are_capped_by_the_work_and_the_machine(tmp_path, capsys, monkeypatch):
    started = []

    class Pool(_check.ProcessPoolExecutor):
        def __init__(self, jobs, **kw):
            started.append(jobs)
            super().__init__(jobs, **kw)

    monkeypatch.setattr(_check, "ProcessPoolExecutor", Pool)
    path = write(tmp_path / "two.jsonl", [line_of(_packed()), line_of(_native())])
    assert report(capsys, path, "--jobs", "1024")[1]["records"] == 2
    assert started == []  # one block of input: one process
    monkeypatch.setattr(_capture, "BLOCK", 1000)
    assert report(capsys, path, "--jobs", "1024")[1]["records"] == 2
    assert started and started[0] <= min(_check._cpus(), 2 * len(line_of(_native())) // 1000 + 2)
    for jobs in ("1025", "10" * 15, "-1"):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["check", path, "--jobs", jobs])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert "argument --jobs/-j: expected 0 (every core) to 1024" in err and "Traceback" not in err


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_end_with_the_main_process():
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "tokenwire", "check", "-", "--jobs", "2"],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        record = line_of(_packed()) + b"\n"
        proc.stdin.write(record * ((_capture.BLOCK // len(record)) + 2))  # a first chunk; then it waits
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        while len(workers := _children(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        if len(workers) < 2 and _check._cpus() < 2:
            pytest.skip("one core: a single process does the work")
        assert len(workers) >= 2
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while (alive := [w for w in workers if _alive(w)]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive, "workers outlived the main process"
    finally:
        proc.kill()
        proc.stdin.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_non_regular_files_are_refused(tmp_path):
    (tmp_path / "d").mkdir()
    write(tmp_path / "d" / "a.jsonl", [line_of(_packed())])
    os.mkfifo(tmp_path / "d" / "pipe.jsonl")
    for args, kind, commands in (([str(tmp_path / "d")], "a FIFO", ("check",)),
                                 ([str(tmp_path / "d" / "pipe.jsonl")], "a FIFO", ("check", "inspect")),
                                 (["/dev/zero"], "a character device", ("check", "inspect"))):
        for command in commands:
            out = subprocess.run([sys.executable, "-m", "tokenwire", command, *args],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 2 and f"is {kind}, not a regular file" in out.stderr, out.stderr
            assert "Traceback" not in out.stderr


def test_records_over_the_size_limit_are_a_defect_class(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_capture, "BLOCK", 64)
    monkeypatch.setattr(_capture, "MAX_RECORD", 1000)
    good = line_of(_packed())
    monkeypatch.setattr(_capture, "MAX_RECORD", len(good) + 10)
    huge = b'{"x": "' + b"a" * (3 * len(good)) + b'"}'
    path = write(tmp_path / "big.jsonl", [good, huge, good, huge])
    status, result = report(capsys, path)
    assert status == 1 and result["records"] == 4 and counts(result) == {"too_large": 2}
    examples = result["classes"]["too_large"]["examples"]
    assert [e["line"] for e in examples] == [2, 4]
    assert f"{len(huge):,} bytes, more than the" in examples[0]["reason"]
    assert result["bytes"] == 2 * len(good) + 2 * len(huge)
    # The last line without its newline, and a whole JSON document.
    (tmp_path / "tail.jsonl").write_bytes(good + b"\n" + huge)
    assert counts(report(capsys, str(tmp_path / "tail.jsonl"))[1]) == {"too_large": 1}
    # A JSON array is read an element at a time: only an element over the limit is too large.
    (tmp_path / "doc.json").write_bytes(b"[" + b",".join([good, huge, good]) + b"]")
    result = report(capsys, str(tmp_path / "doc.json"))[1]
    assert result["records"] == 3 and counts(result) == {"too_large": 1}
    assert result["classes"]["too_large"]["examples"][0]["element"] == 2
    assert cli.main(["inspect", path, "--line", "2"]) == 2
    assert "more than the" in capsys.readouterr().err
    assert cli.main(["inspect", path, "--line", "3"]) == 0


def test_the_verdict_is_the_librarys_on_the_same_bytes(tmp_path, capsys):
    import tokenwire

    good = line_of(_packed())
    records = [b"\xef\xbb\xbf" + good, good + b"\x0b\x0c", b"\x0c" + good, b" \t" + good + b" \r", good]
    path = tmp_path / "edges.jsonl"
    path.write_bytes(b"\n".join(records) + b"\n")
    _, result = report(capsys, str(path), "--examples", "10")
    verdicts = []
    for record in records:
        try:
            tokenwire.parse_generate_response(record)
            verdicts.append(None)
        except tokenwire.MalformedResponseError:
            verdicts.append("malformed_json")
    assert verdicts == ["malformed_json"] * 3 + [None, None]
    assert result["records"] == 5 and counts(result) == {"malformed_json": 3}
    assert sorted(e["line"] for e in result["classes"]["malformed_json"]["examples"]) == [1, 2, 3]
    assert cli.main(["inspect", str(path)]) == 1
    assert "malformed JSON" in capsys.readouterr().out


def _deep(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def test_values_nested_deeper_than_orjson_writes(tmp_path, capsys):
    doc = _packed()
    doc["extra"] = _deep(600)
    array = tmp_path / "deep.json"
    array.write_text(json.dumps([doc, doc]))
    status, result = report(capsys, str(array))
    assert status == 0 and result["records"] == 2
    wrapped = write(tmp_path / "wrapped.jsonl", [json.dumps({"r": doc, "deep": _deep(900)}).encode()])
    assert report(capsys, wrapped, "--field", "r")[0] == 0
    assert report(capsys, wrapped, "--field", "deep")[1]["classes"]["unrecognized"]["count"] == 1
    for args, status in (([str(array), "--line", "2"], 0), ([wrapped, "--field", "r"], 0), ([wrapped], 1)):
        assert cli.main(["inspect", *args]) == status, args  # a verdict, never a traceback
        capsys.readouterr()


def test_out_of_memory_is_an_error_of_the_run_not_a_defect(tmp_path, capsys, monkeypatch):
    from tokenwire.base import _json

    path = write(tmp_path / "x.jsonl", [line_of(_packed())])
    real = _json.loads

    def exhausted(raw):
        if len(raw) > 100:  # what orjson says when an allocation fails
            raise _json.JSONDecodeError("Not enough memory to allocate buffer for parsing", "", 0)
        return real(raw)

    monkeypatch.setattr(_json, "loads", exhausted)
    status, out, err = check(capsys, path)
    assert status == 2 and "malformed" not in out
    assert "out of memory while checking this record" in err and "Traceback" not in err


# --- decompression bombs -------------------------------------------------------------------------

# The peak RSS of this process alone: VmHWM (ru_maxrss would count the forking parent's
# pages too, which Linux carries across exec).
_PEAK = textwrap.dedent(
    """
    import sys
    from tokenwire import cli
    status = cli.main(["check", sys.argv[1], "--report", "json"])
    with open("/proc/self/status") as f:
        print(next(line for line in f if line.startswith("VmHWM:")).split()[1], file=sys.stderr)  # KiB
    sys.exit(status)
    """
)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak RSS from /proc")
@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_a_small_compressed_file_of_huge_output_stays_in_flat_memory(tmp_path, codec):
    """256 MiB of 1 MiB lines in a few hundred KiB (zstd: ~12 KiB): every decompressor's
    output is bounded per read, so the check's peak RSS stays far below the content's size."""
    import zlib

    lines, line = 256, b'{"x":"' + b"a" * ((1 << 20) - 9) + b'"}\n'
    if codec == "zstd":
        packer = pytest.importorskip("zstandard").ZstdCompressor(level=3).compressobj()
    else:
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip header and trailer
    path = tmp_path / f"bomb.jsonl.{'zst' if codec == 'zstd' else 'gz'}"
    path.write_bytes(b"".join([*(packer.compress(line) for _ in range(lines)), packer.flush()]))
    assert path.stat().st_size < 1 << 20
    ran = subprocess.run([sys.executable, "-c", _PEAK, str(path)], capture_output=True, text=True, timeout=300)
    result = json.loads(ran.stdout)
    assert ran.returncode == 1 and result["records"] == lines, ran.stderr[-2000:]
    assert counts(result) == {"unrecognized": lines}
    peak_mib = int(ran.stderr.split()[-1]) / 1024
    assert peak_mib < 160, f"peak RSS {peak_mib:.0f} MiB checking {lines} MiB of {codec} output"


def test_json_lines_of_sglang_batch_responses(tmp_path, capsys):
    """A JSON-lines file whose records are SGLang batch responses (top-level arrays, one a
    line): ``--input auto`` reads the lines, not one document of them all; a one-line array
    alone stays a JSON-array capture."""
    item = next(doc for doc, name in _openai_docs() if name == "sglang" and isinstance(doc, dict))
    path = write(tmp_path / "batches.jsonl", [line_of([item, item]) for _ in range(3)])
    status, result = report(capsys, path)
    assert status == 0 and result["clean"] == 3 and result["formats"] == {"sglang": 3}, result
    alone = write(tmp_path / "array.json", [line_of([item, item])])
    status, result = report(capsys, alone)
    assert status == 0 and result["clean"] == 2, result


@pytest.mark.parametrize("form", ["jsonl", "json"])
def test_an_integer_past_a_double_is_malformed_json(tmp_path, form):
    """An integer literal past a double's range (1e400) is invalid JSON on both
    implementations, one record's verdict: neither out of memory nor a skipped record (nor
    a skipped JSON-array file)."""
    big = line_of(_packed())[:-1] + b',"x":1' + b"0" * 400 + b"}"
    records = [line_of(_packed()), big, line_of(_packed())]
    if form == "jsonl":
        path = write(tmp_path / "big.jsonl", records)
    else:
        path = str(tmp_path / "big.json")
        (tmp_path / "big.json").write_bytes(b"[" + b",".join(records) + b"]")
    results = []
    for switch in ("0", "1"):
        out = subprocess.run([sys.executable, "-m", "tokenwire", "check", path, "--report", "json"],
                             env={**os.environ, "TOKENWIRE_NO_EXTENSIONS": switch}, capture_output=True, text=True)
        assert out.returncode == 1, out.stdout + out.stderr
        result = json.loads(out.stdout)
        assert not result["errors"] and result["clean"] == 2 and result["defective"] == 1, result
        results.append(result["classes"])
    assert results[0] == results[1]


def _peak_rss_kib(path: str) -> int:
    """The peak resident memory of ``tokenwire check path`` in its own process (KiB)."""
    probe = ("import resource, subprocess, sys\n"
             "subprocess.run([sys.executable, '-m', 'tokenwire', 'check', sys.argv[1], '--report', 'json'],"
             " stdout=subprocess.DEVNULL, check=False)\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    out = subprocess.run([sys.executable, "-c", probe, path], capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_json_array_capture_flat_memory(tmp_path):
    """A JSON-array capture's memory is bounded by its largest element (and a 4 MiB block),
    not by the file: parsed whole into Python objects it took 12 to 33 times the file (here
    about 7 times). Peak RSS of checking a 32 MB array of 25 KB elements, less that of a
    one-element array, stays under twelve blocks (48 MiB: the block read, the elements of a
    chunk and their copies), whatever the file's size."""
    n = 2000
    body = json.dumps({"choices": [{"token_ids": list(range(100_000, 100_000 + n)),
                                    "logprobs": {"sampled": [-0.25 - i / 4096 for i in range(n)]}}]}).encode()
    count = 32_000_000 // len(body)
    (tmp_path / "small.json").write_bytes(b"[" + body + b"]")
    (tmp_path / "big.json").write_bytes(b"[" + b",\n".join([body] * count) + b"]")
    size = (tmp_path / "big.json").stat().st_size
    grown = (_peak_rss_kib(str(tmp_path / "big.json")) - _peak_rss_kib(str(tmp_path / "small.json"))) * 1024
    assert grown < 12 * _capture.BLOCK, f"checking a {size / 1e6:.0f} MB array took {grown / 1e6:.0f} MB more"
    status, out, _ = (lambda r: (r.returncode, r.stdout, r.stderr))(subprocess.run(
        [sys.executable, "-m", "tokenwire", "check", str(tmp_path / "big.json"), "--report", "json"],
        capture_output=True, text=True))
    assert status == 0 and json.loads(out)["clean"] == count
