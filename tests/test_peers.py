"""The compiled core (``tokenwire._core``) and its pure-Python peer (``tokenwire._pycore``)
expose one contract: the names of ``_pycore.CONTRACT``, with the same parameters. The core's
other public functions are exactly ``_pycore.CORE_ONLY``, the reference's other names exactly
``_pycore.REFERENCE_ONLY``; the selector hands out one of the two modules whole."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

import tokenwire
from tokenwire import _pycore
from tokenwire.read import _select

try:
    from tokenwire import _core
except ImportError:  # pure-Python install
    _core = None

CONTRACT = _pycore.CONTRACT
CORE_ONLY = _pycore.CORE_ONLY
REFERENCE_ONLY = _pycore.REFERENCE_ONLY
_LISTS = {"CONTRACT", "CORE_ONLY", "REFERENCE_ONLY"}

needs_core = pytest.mark.skipif(_core is None, reason="the compiled core is not built")


def test_the_lists_are_consistent():
    assert len(set(CONTRACT)) == len(CONTRACT)
    assert not set(CONTRACT) & set(CORE_ONLY)
    assert not set(CONTRACT) & set(REFERENCE_ONLY)
    assert not set(CORE_ONLY) & set(REFERENCE_ONLY)
    for reasons in (CORE_ONLY, REFERENCE_ONLY):
        assert all(isinstance(reason, str) and reason.strip() for reason in reasons.values())


def test_the_reference_exposes_the_contract_and_its_own_names_only():
    public = {name for name in vars(_pycore) if not name.startswith("_")} - _LISTS
    assert public == set(CONTRACT) | set(REFERENCE_ONLY)
    assert _pycore.__all__ == list(CONTRACT)
    assert [name for name in public if not callable(getattr(_pycore, name))] == []


@needs_core
def test_the_core_exposes_the_contract():
    assert [name for name in CONTRACT if not callable(getattr(_core, name, None))] == []
    assert [name for name in REFERENCE_ONLY if hasattr(_core, name)] == []


@needs_core
def test_the_core_only_names_are_the_documented_ones():
    """Every public function or class the core defines is a contract name or a documented
    core-only one (the helpers it imports, the reference's own among them, are neither)."""
    own = {name for name, value in vars(_core).items()
           if not name.startswith("_") and callable(value) and getattr(value, "__module__", None) == _core.__name__}
    assert own - set(CONTRACT) == set(CORE_ONLY)
    assert [name for name in CORE_ONLY if not callable(getattr(_core, name, None))] == []


def _parameters(function) -> list[tuple[str, object, object]]:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError) as exc:  # a Cython function compiled without binding
        pytest.fail(f"{function!r} has no readable signature ({exc}): the core must be built with binding")
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


@needs_core
@pytest.mark.parametrize("name", CONTRACT)
def test_same_parameters(name):
    """Names, kinds (positional, keyword-only, ``*values``) and defaults; the reference's
    annotations are its own."""
    assert _parameters(getattr(_core, name)) == _parameters(getattr(_pycore, name))


def test_the_selector_hands_out_one_module():
    assert _select.impl in tuple(m for m in (_core, _pycore) if m is not None)
    assert _select.kernels is _select.impl
    assert tokenwire.implementation == ("python" if _select.impl is _pycore else "c")
    for name in ("parse_generate_response", "parse_completions_response",
                 "parse_chat_completions_response", "parse_sglang_generate_response"):
        # The facade's parser: the implementation's, behind the body and wrong-format checks.
        assert getattr(_select, name) is getattr(_select.impl, name)
        assert tokenwire.read._facade.__dict__[name].__wrapped__ is getattr(_select.impl, name)
        assert getattr(tokenwire, name) is tokenwire.read._facade.__dict__[name]
    assert tokenwire.b64decode is _select.impl.b64decode


def test_without_extensions_the_selector_hands_out_the_reference():
    """``TOKENWIRE_NO_EXTENSIONS=1``: ``_pycore`` as both ``impl`` and ``kernels``, and the facade
    answers the core-only questions itself (no SIMD path)."""
    code = ("import tokenwire; from tokenwire import _pycore; from tokenwire.read import _select; "
            "print(_select.impl is _pycore, _select.kernels is _pycore, tokenwire.implementation, "
            "tokenwire.simd_paths(), tokenwire.simd_path())")
    env = {**os.environ, "TOKENWIRE_NO_EXTENSIONS": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True", "python", "[]", "None"]
