"""The documentation runs as written: every Python block of README.md and docs/*.md runs in a
fresh process (a block that cannot, a fragment, is marked ``<!-- fragment: NAME (why) -->``
on the line before it and listed here by name); the worked examples of docs/arrays.md print
what the page says they print; and the README's test command is exactly what CI runs."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "arrays.md"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# The blocks that do not run alone, by name, and why.
FRAGMENTS = {
    "readme-batch-path": "awaits a server inside a coroutine; docs/quickstart.md runs the same steps whole",
    "arrays-ray": "a Ray cluster and captures on a shared filesystem",
    "migrating-patch": "renderers' generate() against a live server",
    "migrating-parse": "renderers' HTTP client against a live server",
    "rollouts-loop": "a rollout loop around an engine, a tokenizer and a tool of the reader's",
    "engines-openrlhf-loop": "OpenRLHF's own loop over a vLLM RequestOutput, quoted to show what it does",
    "engines-openrlhf-validate": "inside OpenRLHF's agent loop, on the engine's RequestOutput",
    "engines-verl-validate": "inside verl's agent loop, on the in-process engine's output",
    "areal-patch": "AReaL 1.0.4 installed (tests/run_areal_suite.py runs it)",
    "eval-protocol-patch": "eval-protocol 0.3.33 and a Fireworks-compatible server, inside a coroutine",
    "nemo-gym-patch": "NeMo-Gym 0.7.0 installed (Python 3.13; tests/run_nemo_gym_suite.py runs it)",
    "trl-patch": "TRL 1.16.0 and a trl vllm-serve server",
    "skyrl-patch": "SkyRL 0.4.0 installed (tests/run_skyrl_suite.py runs it)",
    "skyrl-clamped": "a rollout's InferenceEngineOutput from SkyRL's patched client",
    "verifiers-patch": "verifiers 0.4.0 and a generate server",
    "openai-sdk-async": "an OpenAI-compatible server, inside a coroutine",
    "openai-sdk-sync": "an OpenAI-compatible server",
}

_BLOCK = re.compile(r"(?:<!-- fragment: ([\w-]+)[^>]*-->\n)?```python\n(.*?)```", re.S)


def blocks() -> list[tuple[str, str | None, str]]:
    """Every Python block: (page:line, its fragment name or None, its code)."""
    found = []
    for page in PAGES:
        text = page.read_text("utf-8")
        for match in _BLOCK.finditer(text):
            line = text[: match.start(2)].count("\n")
            found.append((f"{page.relative_to(ROOT)}:{line}", match[1], match[2]))
    return found


BLOCKS = blocks()


def test_every_fragment_is_listed_and_every_listed_one_marked():
    marked = [name for _, name, _ in BLOCKS if name is not None]
    assert sorted(marked) == sorted(FRAGMENTS)
    assert sum(name is None for _, name, _ in BLOCKS) >= 10


@pytest.mark.parametrize("where, code", [(w, c) for w, n, c in BLOCKS if n is None], ids=[w for w, n, _ in BLOCKS if n is None])
def test_every_block_runs_as_written(tmp_path, where, code):
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{where} failed:\n{run.stderr[-3000:]}"


@pytest.mark.parametrize("section", ["## Worked example", "## The batch path"])
def test_arrays_worked_example(tmp_path, monkeypatch, section):
    code = re.search(re.escape(section) + r".*?```python\n(.*?)```", DOC.read_text(), re.S)[1]
    expected = [line[2:] for line in code.splitlines() if line.startswith("# ")]
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {})
    assert out.getvalue().splitlines() == expected


def test_the_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text("utf-8")
    command = re.search(r"Set up and run the tests.*?```bash\n(.*?)\n```", readme, re.S)[1]
    ci = [line for line in (ROOT / ".ci" / "run").read_text("utf-8").splitlines() if "pytest" in line]
    assert ci == [command]
