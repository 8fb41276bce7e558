"""Every test that takes ``impl`` runs against both implementations, the compiled core once
per code path this CPU has; ``simd`` runs a test on every such path. A path is forced for
every C kernel at once (scanner, record readers, head selection, validation, base64); the
run lists the paths it skipped and why."""

from __future__ import annotations

import importlib
import os
import platform
import sys

import pytest

if os.environ.get("TOKENWIRE_NO_ORJSON", "") not in ("", "0"):
    # The run without orjson: importing it fails outright, so nothing can lean on it unseen.
    sys.modules["orjson"] = None  # type: ignore[assignment]

import tokenwire
from tokenwire.base import _json
from tokenwire import _pycore as PYTHON  # the pure-Python peer of the compiled core

try:
    from tokenwire import _core
except ImportError:  # pure-Python install
    _core = None

_NO_CORE = "the compiled core is not built (pure-Python install or TOKENWIRE_NO_EXTENSIONS=1)"
# The paths of this machine's architecture (a CPU without one of them skips it); the other
# architecture's paths are tested on that architecture (NEON: .ci/aarch64 and the Arm job).
ALL_PATHS = (("scalar", "neon") if platform.machine().lower() in ("aarch64", "arm64")
             else ("scalar", "avx2", "avx512"))


def implementations():
    """The reference, and the compiled core forced onto each SIMD path (the paths this CPU
    lacks are skipped, and the run's header lists them)."""
    params = [pytest.param("python", id="python")]
    forced_off = os.environ.get("TOKENWIRE_NO_EXTENSIONS", "") not in ("", "0")
    for path in ALL_PATHS:
        if _core is None or forced_off:
            marks = [pytest.mark.skip(reason=_NO_CORE)]
        elif path not in _core.simd_paths():
            marks = [pytest.mark.skip(reason=f"this CPU cannot run the {path} path")]
        else:
            marks = []
        params.append(pytest.param(path, id=f"c-{path}", marks=marks))
    return params


@pytest.fixture(params=implementations())
def impl(request):
    if request.param == "python":
        yield PYTHON
        return
    with _core.simd_path_forced(request.param):
        yield _core


@pytest.fixture
def kernels(impl, monkeypatch):
    """The implementation under test, made the one the selector hands out (the writers,
    select_heads, validate and the result types read their kernels from it)."""
    monkeypatch.setattr(tokenwire.read._select, "kernels", impl)
    return impl


@pytest.fixture(params=ALL_PATHS)
def simd(request):
    """Force one code path of the compiled core for the duration of a test."""
    if _core is None:
        pytest.skip(_NO_CORE)
    if request.param not in _core.simd_paths():
        pytest.skip(f"this CPU cannot run the {request.param} path")
    with _core.simd_path_forced(request.param):
        yield request.param


def pytest_report_header(config):
    paths = _core.simd_paths() if _core is not None else []
    missing = [p for p in ALL_PATHS if p not in paths]
    return [
        f"tokenwire: implementation={tokenwire.implementation}, simd paths={paths or 'none'}, "
        f"json={_json.backend}"
        + (f", not testable here: {missing}" if missing else ""),
    ]


@pytest.fixture(scope="session")
def renderers_client():
    """renderers' own client module (the installed release, which the drop-in follows)."""
    try:
        return importlib.import_module("renderers.client")
    except Exception as exc:  # an ImportError, or a broken optional dependency of renderers
        pytest.skip(f"renderers is not importable: {exc}")


from hypothesis import HealthCheck, settings  # noqa: E402

# The implementation fixtures are stateless modules, so sharing them across examples is safe.
settings.register_profile(
    "tokenwire", suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
settings.register_profile(
    "ci", parent=settings.get_profile("tokenwire"), derandomize=False, print_blob=True
)
settings.load_profile(os.environ.get("TOKENWIRE_HYPOTHESIS_PROFILE", "tokenwire"))
