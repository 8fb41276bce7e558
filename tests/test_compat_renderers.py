"""tokenwire.compat.renderers: the drop-in replacements for renderers' generate-client parsers,
the patch, the pytest plugin, and renderers' own test suite run with the patch in place."""

from __future__ import annotations

import asyncio
import base64
import importlib.metadata
import json
import math
import os
import pickle
import subprocess
import sys
import textwrap
import types
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenwire
from tokenwire import MalformedResponseError, samples
from tokenwire.compat import renderers as compat

from . import run_renderers_suite, strategies
from .renderers_fakes import FakeClient, FakeRenderer

EXAMPLES = int(os.environ.get("TOKENWIRE_COMPAT_EXAMPLES", "1000"))
pytestmark = pytest.mark.renderers


def _client_names(client: Any) -> dict[str, Any]:
    return {name: getattr(client, name) for name in compat.REPLACED}


# --- the patch -----------------------------------------------------------------------------------


def test_patch_replaces_and_unpatch_restores(renderers_client):
    theirs = _client_names(renderers_client)
    assert not compat.is_patched()
    compat.patch()
    try:
        assert compat.is_patched()
        for name in compat.REPLACED:
            ours = getattr(compat, name)
            assert getattr(renderers_client, name) is ours
            # generate() looks its helpers up in the module's globals.
            assert renderers_client.generate.__globals__[name] is ours
        assert compat.originals() == theirs
        compat.patch()  # idempotent
        assert compat.originals() == theirs
    finally:
        compat.unpatch()
    assert _client_names(renderers_client) == theirs
    assert not compat.is_patched()
    compat.unpatch()  # harmless when not patched
    assert _client_names(renderers_client) == theirs


def test_patched_context_manager_nests(renderers_client):
    theirs = _client_names(renderers_client)
    with compat.patched() as client:
        assert client is renderers_client
        assert compat.is_patched()
        with compat.patched():
            assert compat.is_patched()
        assert compat.is_patched()  # the outer block still holds the patch
    assert _client_names(renderers_client) == theirs
    with pytest.raises(KeyError), compat.patched():
        raise KeyError("the block's exception passes through")
    assert _client_names(renderers_client) == theirs


def test_patch_reaches_modules_that_re_export(renderers_client):
    original = renderers_client._parse_compact_logprobs
    probe = types.ModuleType("renderers._tokenwire_reexport_probe")
    probe._parse_compact_logprobs = original
    probe.unrelated = original  # another name for it: left alone
    sys.modules[probe.__name__] = probe
    try:
        with compat.patched():
            assert probe._parse_compact_logprobs is compat._parse_compact_logprobs
            assert probe.unrelated is original
        assert probe._parse_compact_logprobs is original
    finally:
        del sys.modules[probe.__name__]


def test_patch_refuses_a_different_signature(renderers_client, monkeypatch):
    def changed(choice, completion_ids, k, extra):  # pragma: no cover - never called
        raise AssertionError

    monkeypatch.setattr(renderers_client, "_parse_compact_logprobs", changed)
    with pytest.raises(RuntimeError, match="does not match"):
        compat.patch()
    assert not compat.is_patched()
    assert renderers_client.parse_generate_response is compat.originals()["parse_generate_response"]


def test_unpatch_leaves_a_later_patch_alone(renderers_client):
    theirs = renderers_client._select_sampler_head

    def someone_elses(*args, **kwargs):  # pragma: no cover - never called
        raise AssertionError

    compat.patch()
    try:
        renderers_client._select_sampler_head = someone_elses
    finally:
        compat.unpatch()
    try:
        assert renderers_client._select_sampler_head is someone_elses
        assert renderers_client._parse_compact_logprobs is compat.originals()["_parse_compact_logprobs"]
    finally:
        renderers_client._select_sampler_head = theirs


def test_replacements_have_renderers_signatures(renderers_client):
    import inspect

    for name in compat.REPLACED:
        assert inspect.signature(getattr(compat, name)).parameters.keys() == inspect.signature(
            getattr(renderers_client, name)
        ).parameters.keys(), name


# --- the error -----------------------------------------------------------------------------------


def test_error_is_both_classes_with_renderers_text(renderers_client):
    error = compat.MalformedGenerateResponseError
    assert issubclass(error, renderers_client.MalformedGenerateResponseError)
    assert issubclass(error, MalformedResponseError)
    assert issubclass(error, ValueError)
    choice = {"compact_logprobs": {"format": "u32-f32-le-v1", "offsets": [0, 2], "num_top_logprobs": 0, "data": "?"}}
    with pytest.raises(error) as info:
        compat._parse_compact_logprobs(choice, [7], None)
    exc = info.value
    assert str(exc) == "Invalid compact logprob base64"
    assert (exc.reason, exc.field, exc.location) == (str(exc), "compact_logprobs.data", "compact_logprobs.data")
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is error and str(again) == str(exc) and again.field == exc.field


# --- the replacements, case by case --------------------------------------------------------------


def _compact(rows: list[list[tuple[int, float]]], num_top: int = 3) -> dict[str, Any]:
    ids = [i for row in rows for i, _ in row]
    values = [p for row in rows for _, p in row]
    offsets = [0]
    for row in rows:
        offsets.append(offsets[-1] + len(row))
    raw = np.asarray(ids, "<u4").tobytes() + np.asarray(values, "<f4").tobytes()
    return {"data": base64.b64encode(raw).decode(), "format": "u32-f32-le-v1", "offsets": offsets,
            "num_top_logprobs": num_top}


LP = {i: math.log(p) for i, p in {1: 0.6, 2: 0.25, 3: 0.1, 4: 0.04, 5: 0.01}.items()}


def _release(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    """The drop-in follows ``version`` for this test, whatever renderers is installed."""
    monkeypatch.setattr(compat, "_followed", (version, compat._RELEASES[version]))


@pytest.mark.parametrize("version", compat.SUPPORTED_VERSIONS[1:])
def test_return_types_follow_the_release(renderers_client, monkeypatch, version):
    """completion_logprobs: Python floats up to 0.1.13.dev16, a float32 array from dev17;
    heads are lists of Python ints and floats in every release."""
    _release(monkeypatch, version)
    arrays = version == "0.1.13.dev17"
    row = [(2, LP[2]), (1, LP[1]), (2, LP[2]), (3, LP[3]), (4, LP[4]), (5, LP[5])]
    choice = {"token_ids": [2, 2], "compact_logprobs": _compact([row, row], 5)}
    sampled, top_ids, top_logprobs = ours = compat._parse_compact_logprobs(choice, [2, 2], 2)
    if compat._installed_version() == version:
        assert _same(ours, renderers_client._parse_compact_logprobs(choice, [2, 2], 2))
    if arrays:
        assert type(sampled) is np.ndarray and sampled.dtype == np.float32 and sampled.shape == (2,)
    else:
        assert type(sampled) is list and all(type(x) is float for x in sampled)
    assert np.asarray(sampled, np.float64).tolist() == [float(np.float32(LP[2]))] * 2
    assert all(type(r) is list and all(type(i) is int for i in r) for r in top_ids)
    assert all(type(r) is list and all(type(p) is float for p in r) for r in top_logprobs)
    for ids in ((2, 2), np.array([2, 2])):
        assert _same(compat._parse_compact_logprobs(choice, ids, None), (sampled, None, None))
    # Packed float32 and float64, native JSON: one logprob per token, of the release's type.
    values = np.array([-0.1, -0.25], np.float64)
    for dtype in ("float32", "float64"):
        packed = {"data": base64.b64encode(values.astype(dtype).tobytes()).decode(), "shape": [2], "dtype": dtype}
        for got in (compat._parse_packed_completion_logprobs(packed, [3, 4]),
                    compat._parse_completion_logprobs({"completion_logprobs": packed}, [3, 4])):
            if arrays:
                assert type(got) is np.ndarray and got.dtype == np.float32
                assert got.tolist() == values.astype(np.float32).tolist()
            else:
                assert type(got) is list and got == values.astype(dtype).tolist()
    native = {"logprobs": {"content": [{"token": "token_id:3", "logprob": -0.1}, {"token_id": 4, "logprob": -0.25}]}}
    got = compat._parse_completion_logprobs(native, [3, 4])
    if arrays:  # rounded to float32, as renderers does from this release on
        assert type(got) is np.ndarray and got.dtype == np.float32 and got.tolist() == values.astype(np.float32).tolist()
    else:
        assert got == [-0.1, -0.25] and all(type(x) is float for x in got)
    empty = compat._parse_completion_logprobs({"logprobs": {"content": []}}, [])
    if arrays:
        assert (empty.dtype, empty.shape) == (np.float32, (0,))
    else:
        assert empty == []


def test_the_stable_release_reads_what_it_reads(renderers_client, monkeypatch):
    """0.1.12 (the release verifiers 0.4.0 installs) defines parse_generate_response and
    _parse_completion_logprobs alone: packed completion_logprobs are not read, a native
    record is named by its "token_id:N" string alone, compact_logprobs' data stays a str,
    and the logprobs are Python floats."""
    _release(monkeypatch, "0.1.12")
    assert compat._replaced() == ("parse_generate_response", "_parse_completion_logprobs")
    native = {"logprobs": {"content": [{"token": "token_id:3", "logprob": -0.1},
                                       {"token": "token_id:4", "logprob": -0.25}]}}
    got = compat._parse_completion_logprobs(native, [3, 4])
    assert got == [-0.1, -0.25] and all(type(x) is float for x in got)
    packed = {"data": base64.b64encode(np.array([-0.1, -0.25], np.float32).tobytes()).decode(),
              "shape": [2], "dtype": "float32"}
    # Packed logprobs beside the records are not read; alone they are no logprobs.
    assert compat._parse_completion_logprobs({**native, "completion_logprobs": packed}, [3, 4]) == got
    error = compat.MalformedGenerateResponseError
    with pytest.raises(error, match=r"^Engine response choice\.logprobs must be an object\.$"):
        compat._parse_completion_logprobs({"completion_logprobs": packed}, [3, 4])
    # An int token_id beside a "token" string is not read: the string decides.
    by_int = {"logprobs": {"content": [{"token": "token_id:3", "logprob": -0.1},
                                       {"token_id": 4, "token": "x", "logprob": -0.25}]}}
    with pytest.raises(error, match=r"content\[1\]\.token must be 'token_id:4'"):
        compat._parse_completion_logprobs(by_int, [3, 4])
    by_int["logprobs"]["content"][1]["token"] = "token_id:4"
    assert compat._parse_completion_logprobs(by_int, [3, 4]) == got
    # A mask without its sampled id is refused (0.1.12 passes it through unread).
    with pytest.raises(error, match="Invalid recorded sampling support"):
        compat._parse_completion_logprobs({**native, "sampling_mask": [[3, 5], [5]]}, [3, 4])
    document = json.loads(samples.sample("compact_8k_top20"))
    raw = json.dumps(document).encode()
    data = compat.parse_generate_response(raw)["choices"][0]["compact_logprobs"]["data"]
    assert type(data) is str and data == document["choices"][0]["compact_logprobs"]["data"]
    routed = compat.parse_generate_response(samples.sample("moe_16k"))["choices"][0]["routed_experts"]["data"]
    assert type(routed) is memoryview


def test_the_stable_release_is_patched_where_it_defines(renderers_client, monkeypatch):
    """patch() on 0.1.12 replaces the two functions it defines, and never asks for the others
    (which 0.1.12 lacks: an AttributeError before)."""
    import renderers

    monkeypatch.setattr(renderers, "__version__", "0.1.12")
    monkeypatch.setattr(compat, "_followed", None)
    for name in compat.REPLACED[1:]:
        if name != "_parse_completion_logprobs":
            monkeypatch.delattr(renderers_client, name)
    theirs = {n: getattr(renderers_client, n) for n in ("parse_generate_response", "_parse_completion_logprobs")}
    with compat.patched():
        assert compat.is_patched()
        for name in theirs:
            assert getattr(renderers_client, name) is getattr(compat, name)
        assert compat.originals() == theirs
    assert {n: getattr(renderers_client, n) for n in theirs} == theirs


def test_float32_logprobs_are_handed_over_without_a_copy():
    values = np.array([-0.5, -0.25], np.float32)
    assert compat._FLOAT32_ARRAYS.logprobs(values) is values
    widened = compat._FLOAT32_ARRAYS.logprobs(values.astype(np.float64))
    assert widened.dtype == np.float32 and widened.tolist() == values.tolist()


def test_the_installed_release_is_followed(renderers_client, monkeypatch):
    import renderers

    monkeypatch.setattr(compat, "_followed", None)
    assert compat.renderers_version() == renderers.__version__ == compat._installed_version()
    assert renderers.__version__ in compat.SUPPORTED_VERSIONS
    # Without renderers, the newest release's types.
    monkeypatch.setattr(compat, "_installed_version", lambda: None)
    monkeypatch.setattr(compat, "_followed", None)
    assert compat.renderers_version() == compat.SUPPORTED_VERSIONS[-1]
    assert list(compat.SUPPORTED_VERSIONS) == ["0.1.12", *(f"0.1.13.dev{n}" for n in range(13, 18))]


def test_an_unknown_release_is_refused(renderers_client, monkeypatch):
    monkeypatch.setattr(compat, "_installed_version", lambda: "0.1.14")
    monkeypatch.setattr(compat, "_followed", None)
    theirs = _client_names(renderers_client)
    with pytest.raises(RuntimeError) as info:
        compat.patch()
    message = str(info.value)
    assert "does not support renderers 0.1.14" in message
    assert all(version in message for version in compat.SUPPORTED_VERSIONS)
    assert not compat.is_patched() and _client_names(renderers_client) == theirs
    with pytest.raises(RuntimeError, match="does not support renderers 0.1.14"):
        compat._parse_completion_logprobs({"logprobs": {"content": []}}, [])
    with pytest.raises(RuntimeError, match="does not support renderers 0.1.14"):
        compat.renderers_version()


def test_patch_follows_the_release_imported(renderers_client, monkeypatch):
    """patch() reads the release again (the loaded package's version wins over metadata)."""
    import renderers

    monkeypatch.setattr(compat, "_followed", ("0.1.13.dev13" if renderers.__version__ != "0.1.13.dev13"
                                              else "0.1.13.dev17", compat._FLOAT_LISTS))
    with compat.patched():
        assert compat.renderers_version() == renderers.__version__
    monkeypatch.setattr(renderers, "__version__", "0+unknown")  # a source checkout
    monkeypatch.setattr(compat, "_followed", None)
    assert compat.renderers_version() == importlib.metadata.version("renderers")


def test_parse_generate_response_returns_views(renderers_client):
    raw = samples.sample("moe_16k")
    ours, theirs = compat.parse_generate_response(raw), renderers_client.parse_generate_response(raw)
    routed = ours["choices"][0]["routed_experts"]["data"]
    assert type(routed) is memoryview and routed.readonly
    assert routed == theirs["choices"][0]["routed_experts"]["data"]
    raw = samples.sample("compact_8k_top20")
    data = compat.parse_generate_response(raw)["choices"][0]["compact_logprobs"]["data"]
    assert type(data) is memoryview
    assert data == renderers_client.parse_generate_response(raw)["choices"][0]["compact_logprobs"]["data"]


def test_parse_generate_response_reads_any_key_order_and_escapes():
    raw = samples.sample("multi_choice")
    document = json.loads(raw)
    for choice in document["choices"]:
        packed = choice["compact_logprobs"]
        choice["compact_logprobs"] = {"format": packed.pop("format"), **packed}  # data not first
    spelled = json.dumps(document).replace("/", "\\/").encode()
    ours = compat.parse_generate_response(spelled)
    for choice, original in zip(ours["choices"], json.loads(raw)["choices"]):
        assert choice["compact_logprobs"]["data"] == original["compact_logprobs"]["data"].encode()


def test_parse_generate_response_is_strict():
    good = json.loads(samples.sample("multi_choice"))
    for document, reason in [
        ([good], "response must be a JSON object"),
        ({**good, "choices": []}, "choices must be a non-empty list"),
        ({**good, "prompt_token_ids": [-1]}, "prompt_token_ids must hold token ids in [0, 2**32)"),
        ({**good, "choices": [{**good["choices"][0], "token_ids": [True]}]}, "token_ids must hold token ids in [0, 2**32)"),
        ({**good, "choices": [{**good["choices"][0], "routed_experts": {"data": "AAAA", "shape": [2, 1, 1]}}]},
         "routed_experts shape [2, 1, 1] x 1 bytes does not match 3 decoded bytes"),
    ]:
        with pytest.raises(MalformedResponseError) as info:
            compat.parse_generate_response(json.dumps(document).encode())
        assert str(info.value) == reason
    with pytest.raises(MalformedResponseError, match="invalid JSON"):
        compat.parse_generate_response(samples.sample("multi_choice")[:-1])
    with pytest.raises(MalformedResponseError, match="invalid JSON"):
        compat.parse_generate_response(b'{"choices":[{"token_ids":[1]}],"usage":{"x":NaN}}')


def test_non_finite_literals_are_read_only_as_logprobs(renderers_client):
    raw = (b'{"choices":[{"token_ids":[7],"logprobs":{"content":[{"token":"token_id:7","logprob":-Infinity,'
           b'"top_logprobs":[{"token":"token_id:7","logprob":NaN}]}]}}]}')
    choice = compat.parse_generate_response(raw)["choices"][0]
    assert choice["logprobs"]["content"][0]["logprob"] == -math.inf
    theirs = renderers_client.parse_generate_response(raw)["choices"][0]
    for parse in (compat._parse_completion_logprobs, renderers_client._parse_completion_logprobs):
        with pytest.raises(renderers_client.MalformedGenerateResponseError) as info:
            parse(choice if parse is compat._parse_completion_logprobs else theirs, [7])
        assert str(info.value) == "Engine response choice.logprobs.content[0].logprob must be finite."


def test_huge_integer_logprobs_are_not_finite(renderers_client):
    """json.loads reads -1e400 written as an integer exactly; as a float it is not finite."""
    choice = {"logprobs": {"content": [{"token_id": 7, "logprob": -(10**400)}]}}
    for parse in (compat._parse_completion_logprobs, renderers_client._parse_completion_logprobs):
        with pytest.raises(renderers_client.MalformedGenerateResponseError) as info:
            parse(choice, [7])
        assert str(info.value) == "Engine response choice.logprobs.content[0].logprob must be finite."
    choice["logprobs"]["content"][0].update(logprob=-0.5, top_logprobs=[{"token_id": 7, "logprob": -(10**400)}])
    with pytest.raises(compat.MalformedGenerateResponseError, match="Top logprob must be finite"):
        compat._parse_completion_top_logprobs(choice, [7], 1)


def test_sampling_mask_forms(renderers_client):
    choice = {"sampling_mask": [[3, 1], [2]]}
    assert compat._parse_sampling_mask(choice, [3, 2]) == renderers_client._parse_sampling_mask(choice, [3, 2])
    packed = {
        name: {"data": base64.b64encode(np.asarray(v, "<i4").tobytes()).decode(), "shape": [len(v)], "dtype": "int32"}
        for name, v in (("ids", [3, 1, 2]), ("counts", [2, 1]))
    }
    assert compat._parse_sampling_mask({"sampling_mask": packed}, [3, 2]) == [[3, 1], [2]]
    assert compat._parse_sampling_mask({}, [3, 2]) is None
    # prime-rl's kept_tokens is not read, as renderers reads none (even one it would reject).
    kept = {name: value["data"] for name, value in packed.items()}
    assert compat._parse_sampling_mask({"kept_tokens": kept}, [3, 2]) is None
    assert compat._parse_sampling_mask({"kept_tokens": {"ids": "!", "counts": 5}}, [3, 2]) is None


def _entries(entries: Any) -> Any:
    if entries is None:
        return None
    c = entries.candidates
    return (entries.sampled.tolist(), entries.sampled_err, c.offsets.tolist(), c.ids.tolist(),
            c.logprobs.tolist(), entries.entry_lps.tolist(), entries.top_err)


def _native_agrees(content: Any, ids: list[int]) -> bool:
    """The whole-list reading of native records, where it answers, equals the reference's
    record loop; returns whether it answered."""
    from tokenwire.kernels import python as python_kernels

    answered = False
    array = np.array(ids, dtype=np.int64)
    for want_top in (False, True):
        fast = compat._native_well_formed(content, array, want_top)
        if fast is not None:
            answered = True
            assert _entries(fast) == _entries(python_kernels.native_entries(content, array, want_top))
    return answered


@settings(max_examples=EXAMPLES // 2)
@given(strategies.cases())
def test_native_records_read_whole_match_the_record_loop(case):
    try:
        document = json.loads(case.raw)
    except ValueError:
        return
    choices = document.get("choices") if isinstance(document, dict) else None
    for choice in choices if isinstance(choices, list) else []:
        if not isinstance(choice, dict):
            continue
        logprobs = choice.get("logprobs")
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        ids = choice.get("token_ids")
        if isinstance(content, list) and isinstance(ids, list) and len(ids) == len(content) and all(
            type(i) is int and 0 <= i < 2**32 for i in ids
        ):
            _native_agrees(content, ids)


def test_native_records_read_whole_edge_cases():
    def entry(token: Any = "token_id:7", logprob: Any = -0.5, **extra: Any) -> dict[str, Any]:
        top = extra.pop("top", [{"token": "token_id:7", "logprob": -0.5}, {"token": "token_id:8", "logprob": -1.0}])
        return {"token": token, "logprob": logprob, "top_logprobs": top, **extra}

    assert _native_agrees([entry()], [7])  # the usual form is read whole
    for content in (
        [entry(token="token_id:007")],  # the loop accepts it: the whole reading leaves it to the loop
        [entry(token_id=7)],
        [entry(logprob=True)],
        [entry(logprob=0)],
        [entry(logprob=-9999.0)],
        [entry(top=[{"token": "token_id:7", "logprob": -0.5}, {"token": "token_id:7", "logprob": -0.5}])],
        [entry(top=[{"token": "token_id:\u0667", "logprob": -0.5}])],
        [entry(top=[{"token": "token_id:4294967296", "logprob": -0.5}])],
        [entry(top=[{"token_id": 9, "token": "token_id:8", "logprob": -0.5}])],
        [entry(top=[{"token": "token_id:8", "logprob": 0.5}])],
        [entry(top=[{"token": "token_id:8", "logprob": None}])],
        [entry(top=[])],
        [entry(top=None)],
        [entry(top=[["token_id:8", -0.5]])],
        [entry(), ["not", "a", "record"]],
    ):
        _native_agrees(content, [7] * len(content))


# --- the pytest plugin ---------------------------------------------------------------------------


PROBE = textwrap.dedent(
    """
    import os
    from renderers.client import _parse_compact_logprobs, generate

    def test_probe():
        expected = os.environ["PROBE_EXPECTS"]
        assert _parse_compact_logprobs.__module__ == expected
        assert generate.__globals__["_parse_compact_logprobs"].__module__ == expected
    """
)


@pytest.mark.parametrize(
    "args, env, expected",
    [
        (["-p", "tokenwire.compat.renderers_plugin"], {}, "tokenwire.compat.renderers"),
        (["-p", "tokenwire.compat.renderers_plugin", "--tokenwire-no-patch"], {}, "renderers.client"),
        (["-p", "tokenwire.compat.renderers_plugin"], {"TOKENWIRE_RENDERERS_PATCH": "0"}, "renderers.client"),
    ],
    ids=["plugin", "option-off", "env-off"],
)
def test_plugin_patches_before_collection(renderers_client, tmp_path, args, env, expected):
    (tmp_path / "test_probe.py").write_text(PROBE)
    environment = {**os.environ, "PROBE_EXPECTS": expected, **env}
    environment.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), *args, "test_probe.py"],
        cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    if expected == "tokenwire.compat.renderers":
        assert "stayed patched for the whole session" in done.stdout


# --- renderers' own suite ------------------------------------------------------------------------


@pytest.mark.parametrize("version", compat.SUPPORTED_VERSIONS)
def test_renderers_suite_passes_patched(version, tmp_path):
    """renderers' tests/test_client.py of each release the drop-in follows, that release's own
    package imported: everything that passes without the patch passes with it, with the same
    skips (sdists from TOKENWIRE_RENDERERS_SDIST, or downloaded; in CI they must be had)."""
    # Each release's package runs on the dependencies the installed renderers brought along
    # (the reference extra); without it there is nothing to run them on.
    pytest.importorskip("renderers", reason="renderers (the reference extra) is not installed")
    try:
        result = run_renderers_suite.run_suite(os.environ.get("TOKENWIRE_RENDERERS_SDIST"), version=version,
                                               workdir=tmp_path)
    except run_renderers_suite.SuiteUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"renderers {version}: {exc}")
        pytest.skip(str(exc))
    print(result.report())
    assert result.ok, result.report()
    assert result.version == version
    assert result.unpatched.count("passed") > 0
    for outcome in ("passed", "skipped"):
        assert result.patched.count(outcome) == result.unpatched.count(outcome), outcome


def _fake_sdist(directory: Any, version: str) -> Any:
    import tarfile

    top = directory / f"renderers-{version}"
    (top / "tests").mkdir(parents=True)
    (top / "tests" / "test_client.py").write_text("")
    (top / "PKG-INFO").write_text(f"Metadata-Version: 2.4\nName: renderers\nVersion: {version}\n")
    archive = directory / f"renderers-{version}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(top, arcname=top.name)
    return archive


def test_suite_takes_each_release_from_the_sdists_given(tmp_path, monkeypatch):
    suite = run_renderers_suite
    given = tmp_path / "given"
    given.mkdir()
    old, new = _fake_sdist(given, "0.1.13.dev13"), _fake_sdist(given, "0.1.13.dev17")

    def no_download(dest, version, python=sys.executable):
        raise suite.SuiteUnavailable(f"would download {version}")

    monkeypatch.setattr(suite, "download", no_download)
    work = tmp_path / "work"
    for sdist, version, expected in [
        (given, "0.1.13.dev17", "0.1.13.dev17"),  # a directory of archives
        (new, "0.1.13.dev17", "0.1.13.dev17"),  # the archive itself
        (new, None, "0.1.13.dev17"),  # whichever release it holds
        (given / "renderers-0.1.13.dev13", "0.1.13.dev13", "0.1.13.dev13"),  # extracted
    ]:
        assert suite.sdist_version(suite.sdist_root(str(sdist), work, version)) == expected
    for sdist, version in [(old, "0.1.13.dev17"), (given, "0.1.13.dev15"), (None, "0.1.13.dev16"),
                           (given / "renderers-0.1.13.dev13", "0.1.13.dev17")]:
        with pytest.raises(suite.SuiteUnavailable, match=f"would download {version}"):
            suite.sdist_root(str(sdist) if sdist else None, work, version)
    with pytest.raises(suite.SuiteUnavailable, match="no such sdist"):
        suite.sdist_root(str(tmp_path / "missing.tar.gz"), work)
    assert suite.main(["--sdist", str(tmp_path / "missing.tar.gz")]) == 2


def test_suite_comparison_finds_every_difference():
    Run, compare = run_renderers_suite.Run, run_renderers_suite.compare
    mark = run_renderers_suite.PATCHED_MARK
    before = Run({"t::a": "passed", "t::b": "skipped", "t::c": "failed"}, {"t::b": "no torch"}, "", 1)
    assert compare(before, Run(dict(before.outcomes), dict(before.skips), mark, 1)).ok  # c fails both ways
    for outcomes, skips, output, expected in [
        ({"t::a": "failed", "t::b": "skipped", "t::c": "failed"}, {"t::b": "no torch"}, mark, "passes unpatched, failed patched"),
        ({"t::a": "passed", "t::b": "passed", "t::c": "failed"}, {}, mark, "skipped unpatched, passed patched"),
        ({"t::a": "passed", "t::b": "skipped", "t::c": "failed"}, {"t::b": "other"}, mark, "another reason"),
        ({"t::a": "passed", "t::b": "skipped"}, {"t::b": "no torch"}, mark, "only in the unpatched run"),
        (dict(before.outcomes), dict(before.skips), "", "patch in place"),
    ]:
        result = compare(before, Run(outcomes, skips, output, 1))
        assert not result.ok and any(expected in p for p in result.problems), (expected, result.problems)
    # Which release the drop-in followed, from the plugin's closing line.
    after = Run(dict(before.outcomes), dict(before.skips), f"{mark} (renderers 0.1.13.dev17)\n", 1)
    assert compare(before, after, "0.1.13.dev17").ok
    result = compare(before, after, "0.1.13.dev13")
    assert [p for p in result.problems if "did not follow renderers 0.1.13.dev13 (it followed 0.1.13.dev17)" in p]
    assert not compare(before, Run(dict(before.outcomes), dict(before.skips), mark, 1), "0.1.13.dev17").ok


# --- differential: ours against renderers' originals ---------------------------------------------


def _same(ours: Any, theirs: Any) -> bool:
    """Equal values of the same kinds: arrays of one dtype and shape, lists and tuples
    element by element, anything else by ``==``."""
    if isinstance(theirs, np.ndarray) or isinstance(ours, np.ndarray):
        return (type(ours) is type(theirs) and ours.dtype == theirs.dtype and ours.shape == theirs.shape
                and np.array_equal(ours, theirs, equal_nan=True))
    if type(theirs) in (list, tuple):
        return type(ours) is type(theirs) and len(ours) == len(theirs) and all(map(_same, ours, theirs))
    return bool(ours == theirs)


def _normal(value: Any) -> Any:
    """A parsed document with every base64 payload as text (views and strings alike), and
    arrays as their dtype and values."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tolist())
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, memoryview):
        return value.tobytes().decode("utf-8", "surrogateescape")
    return value


def _call(function: Any, *args: Any) -> tuple:
    """``("ok", value)``, ``("error", class, message, field)`` for a rejection (renderers' or
    tokenwire's error), or ``("raised", class, message, None)`` for anything else."""
    from renderers.client import MalformedGenerateResponseError

    try:
        return ("ok", function(*args))
    except (MalformedResponseError, MalformedGenerateResponseError) as exc:
        return ("error", type(exc), str(exc), getattr(exc, "field", None))
    except Exception as exc:
        return ("raised", type(exc), str(exc), None)


def _steps(client: Any, raw: bytes, k: int | None) -> list[tuple[str, tuple]]:
    """What renderers' generate() runs on a response, one outcome per call, until one fails."""
    steps = [("parse_generate_response", _call(client.parse_generate_response, raw))]
    if steps[-1][1][0] != "ok":
        return steps
    try:  # generate()'s own reading of the document
        data = steps[-1][1][1]
        choice = (data.get("choices") or [{}])[0]
        ids = choice.get("token_ids") or []
    except Exception as exc:
        return [*steps, ("generate", ("raised", type(exc), str(exc), None))]
    calls: list[tuple[str, tuple]] = []
    if choice.get("compact_logprobs") is not None:
        calls.append(("_parse_compact_logprobs", (choice, ids, k)))
    else:
        if choice.get("completion_logprobs") is not None:
            calls.append(("_parse_packed_completion_logprobs", (choice["completion_logprobs"], ids)))
        calls.append(("_parse_completion_logprobs", (choice, ids)))
        if k is not None:
            calls.append(("_parse_completion_top_logprobs", (choice, ids, k)))
    if choice.get("sampling_mask") is not None and k is not None:
        calls.append(("_parse_sampling_mask", (choice, ids)))
    for name, args in calls:
        steps.append((name, _call(getattr(client, name), *args)))
        if steps[-1][1][0] != "ok":
            break
    return steps


def _python_values(value: Any) -> bool:
    """Lists of Python ints and floats all the way down (None allowed), as renderers returns;
    a float32 array where the release followed returns one."""
    if value is None or type(value) in (int, float):
        return True
    if type(value) is np.ndarray:
        return compat._follow() is compat._FLOAT32_ARRAYS and value.dtype == np.float32 and value.ndim == 1
    if type(value) in (list, tuple):
        return all(_python_values(v) for v in value)
    return False


COMPARED: list[str] = []


@settings(max_examples=EXAMPLES)
@given(strategies.cases())
def test_replacements_match_renderers(renderers_client, case):
    """The calls renderers' generate() makes, on ours and on renderers' originals: equal
    values step by step, and the same error (class and message) where renderers rejects."""
    assert not compat.is_patched()
    if strategies.read_otherwise(case):
        return  # documented: an empty sampling_mask row is a token without a support
    theirs = _steps(renderers_client, case.raw, case.top_k)
    ours = _steps(compat, case.raw, case.top_k)
    for name, outcome in ours:
        assert outcome[0] != "raised", f"{name} raised {outcome[1].__name__}: {outcome[2]}"
        if outcome[0] == "error":
            assert issubclass(outcome[1], renderers_client.MalformedGenerateResponseError)
    (_, mine), (their_name, other) = ours[-1], theirs[-1]
    if other[0] == "raised":
        if their_name == "parse_generate_response" and issubclass(other[1], (json.JSONDecodeError, UnicodeDecodeError)):
            assert mine[0] == "error", (case.mutation, mine)  # its JSON reader refused the bytes
        return  # otherwise renderers crashed (KeyError, StopIteration, ...): nothing to compare
    # renderers' byte splice misreads "\/" inside base64 and takes decoy '"data":"' prefixes,
    # so from its parse on it works on another document.
    spliced_wrong = case.spelling in ("escaped_slash", "decoys")
    for (name, a), (_, b) in zip(ours, theirs):
        if a[0] != "ok" or b[0] != "ok":
            break
        if name == "parse_generate_response":
            for choice in a[1]["choices"]:
                for field in ("routed_experts", "compact_logprobs"):
                    value = choice.get(field)
                    if isinstance(value, dict) and value.get("data") is not None:
                        assert type(value["data"]) is memoryview
            if spliced_wrong:
                return
            assert _normal(a[1]) == _normal(b[1])
        else:
            assert _same(a[1], b[1]), (name, case.mutation)
            assert _python_values(a[1]), name
    documented = case.mutation in strategies.STRICTER_THAN_RENDERERS
    # Documented too: tokenwire validates a sampling mask also when no head is selected.
    mask_without_head = (
        mine[0] == "error" and case.top_k is None
        and (mine[3] or "").split(".")[0] in ("sampling_mask", "kept_tokens")
    )
    if other[0] == "error":
        assert mine[0] == "error", (case.mutation, other)
        if not documented:
            # The same decision; a mask error may come one call earlier (tokenwire checks a
            # present mask with the sampled logprobs), never another error.
            assert mine[2] == other[2], (case.mutation, mine[2], other[2])
        COMPARED.append("error")
    elif mine[0] == "error":
        assert documented or mask_without_head, (case.mutation, mine[2])
    else:
        assert len(ours) == len(theirs)
        COMPARED.append("ok")


def test_replacements_comparison_covered_enough(renderers_client):
    if not COMPARED:
        pytest.skip("run together with test_replacements_match_renderers")
    accepted, rejected = COMPARED.count("ok"), COMPARED.count("error")
    print(f"compared with renderers: {accepted} accepted, {rejected} rejected by both")
    assert accepted >= EXAMPLES // 10 and rejected >= EXAMPLES // 10


@settings(max_examples=EXAMPLES)
@given(
    st.dictionaries(st.integers(0, 9), st.sampled_from([math.log(p) for p in (0.5, 0.25, 0.2, 0.1, 0.05)] + [-9999.0]),
                    max_size=7),
    st.integers(0, 9),
    st.sampled_from([math.log(p) for p in (0.5, 0.25, 0.2)]),
    st.integers(1, 4),
    st.none() | st.lists(st.integers(0, 9), min_size=1, max_size=4, unique=True),
)
def test_select_sampler_head_matches_renderers(renderers_client, head, sampled_id, sampled_logprob, k, support):
    ours = _call(compat._select_sampler_head, head, sampled_id, sampled_logprob, k, support)
    theirs = _call(renderers_client._select_sampler_head, head, sampled_id, sampled_logprob, k, support)
    if ours[0] == "error":
        assert theirs[0] == "error" and ours[2] == theirs[2]
        assert issubclass(ours[1], renderers_client.MalformedGenerateResponseError)
    else:
        assert ours == theirs


# --- generate() end to end -----------------------------------------------------------------------


def _generate(client_module: Any, raw: bytes, k: int | None) -> dict[str, Any]:
    params = {"logprobs": k} if k is not None else {}
    return asyncio.run(client_module.generate(
        client=FakeClient(raw), renderer=FakeRenderer(), messages=[{"role": "user", "content": "hi"}],
        model="m", sampling_params=params, max_prompt_len=1 << 20,
    ))


@pytest.mark.parametrize("name", list(samples.SAMPLES))
def test_generate_returns_what_renderers_returns(renderers_client, name):
    spec = samples.SAMPLES[name]
    expected = _generate(renderers_client, spec.raw, spec.top_k)
    with compat.patched() as client:
        result = _generate(client, spec.raw, spec.top_k)
    assert result.keys() == expected.keys()
    for key in result:
        if key != "prompt_attribution":  # a fresh RenderedTokens each call
            assert _normal(result[key]) == _normal(expected[key]), key
    assert tokenwire.implementation in ("c", "python")
