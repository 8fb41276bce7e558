"""The package's types, as a user's code sees them: ``mypy --strict`` on a rollout collector
shaped like a trainer's (request helpers, parse_many, collate, to_torch) passes against the
stub, and the types it relies on are the precise ones (the Literals, the tensors' dict)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mypy")

EXAMPLE = textwrap.dedent('''
    from __future__ import annotations

    import httpx
    import torch

    import tokenwire


    def request(prompt: list[int]) -> dict[str, object]:
        return tokenwire.generate_request_params(
            {"model": "policy", "token_ids": prompt, "sampling_params": {"max_tokens": 64}},
            top_k=20, compact=True, sampling_mask=True)


    def step(http: httpx.Client, prompts: list[list[int]], pad_id: int) -> torch.Tensor:
        replies = [http.post("/inference/v1/generate", json=request(p)) for p in prompts]
        responses = tokenwire.parse_many([r.content for r in replies], top_k=20, errors="raise")
        kept: list[tokenwire.GenerateResponse] = responses  # no errors in the list with errors="raise"
        batch: tokenwire.Batch = tokenwire.collate(kept, pad_id=pad_id)
        tensors: tokenwire.BatchTensors = batch.to_torch()
        mask: torch.Tensor = tensors["mask"]
        logprobs = tensors.get("completion_logprobs")
        assert logprobs is not None
        return (logprobs * mask).sum()


    def audit_all(bodies: list[bytes]) -> int:
        found = tokenwire.parse_many(bodies, format="chat", errors="collect")
        bad = [r for r in found if isinstance(r, tokenwire.MalformedResponseError)]
        chat = tokenwire.chat_completions_request_params({"model": "m", "messages": []}, top_k=4, sdk=True)
        sdk_extra: object = chat["extra_body"]
        body: bytes = tokenwire.dumps_completions_response([{"token_ids": [1], "logprobs": [-0.5]}])
        verdict = tokenwire.audit(body, "completions")
        impl: str = tokenwire.implementation
        return len(bad) + len(str(sdk_extra)) + len(verdict.message or "") + len(impl)
''')

# What the stub must refuse: a format or errors value that is not one of the Literals.
WRONG = textwrap.dedent('''
    import tokenwire

    tokenwire.parse_many([b"{}"], format="vllm")
    tokenwire.parse_many([b"{}"], errors="ignore")
''')


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One mypy cache for the module's runs: the second reuses what the first read (numpy's,
    torch's and tokenwire's types)."""
    return tmp_path_factory.mktemp("mypy-cache")


def _mypy(tmp_path, cache, code: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "collector.py"
    path.write_text(code)
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), str(path)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)


def test_mypy_strict_passes_on_a_user_shaped_collector(tmp_path, cache):
    pytest.importorskip("torch")
    pytest.importorskip("httpx")
    run = _mypy(tmp_path, cache, EXAMPLE)
    assert run.returncode == 0, run.stdout + run.stderr


def test_mypy_refuses_a_format_or_errors_outside_the_literals(tmp_path, cache):
    run = _mypy(tmp_path, cache, WRONG)
    assert run.returncode == 1
    assert run.stdout.count("error:") == 2, run.stdout
    assert "collector.py:4: error: No overload variant" in run.stdout and "collector.py:5: error" in run.stdout


def test_every_entry_of_the_stub_has_a_docstring():
    import ast
    from importlib import resources

    tree = ast.parse(resources.files("tokenwire").joinpath("__init__.pyi").read_text("utf-8"))
    undocumented = sorted({node.name for node in tree.body
                           if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
                          - {node.name for node in tree.body
                             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                             and ast.get_docstring(node)})
    assert undocumented == []
