"""The worked examples of docs/arrays.md run and print what the page says they print."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "arrays.md"


@pytest.mark.parametrize("section", ["## Worked example", "## The batch path"])
def test_arrays_worked_example(tmp_path, monkeypatch, section):
    pytest.importorskip("pyarrow")
    pytest.importorskip("torch")
    code = re.search(re.escape(section) + r".*?```python\n(.*?)```", DOC.read_text(), re.S)[1]
    expected = [line[2:] for line in code.splitlines() if line.startswith("# ")]
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {})
    assert out.getvalue().splitlines() == expected
