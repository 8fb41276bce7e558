"""pytest plugin: a test session with tokenwire's NeMo-Gym drop-in patched in.

    python -m pytest -p tokenwire.compat.nemo_gym_plugin tests/

The patch (:func:`tokenwire.compat.nemo_gym.patch`) is applied while pytest loads its
initial conftest files, before test modules run ``from nemo_gym.server_utils import
get_response_json``, and removed when the session ends. Disable it with
``--tokenwire-no-nemo-gym-patch`` or ``TOKENWIRE_NEMO_GYM_PATCH=0``. The terminal summary says whether
the patch stayed in place for the whole session.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

ENV = "TOKENWIRE_NEMO_GYM_PATCH"
OPTION = "--tokenwire-no-nemo-gym-patch"
SUMMARY = "tokenwire: NeMo-Gym stayed patched for the whole session"

_state: dict[str, Any] = {"patched": False, "disabled": None}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("tokenwire").addoption(
        OPTION, action="store_true", default=False,
        help=f"do not patch NeMo-Gym with tokenwire's drop-in (also: {ENV}=0)")


def _patch(config: pytest.Config) -> None:
    if _state["patched"]:
        return
    if os.environ.get(ENV, "").strip().lower() in ("0", "false", "no", "off"):
        _state["disabled"] = f"{ENV}={os.environ[ENV]}"
        return
    if getattr(getattr(config, "known_args_namespace", None), "tokenwire_no_nemo_gym_patch", False):
        _state["disabled"] = OPTION
        return
    from . import nemo_gym as compat

    try:
        compat.patch()
    except (ImportError, RuntimeError) as exc:
        raise pytest.UsageError(f"tokenwire.compat.nemo_gym_plugin: {exc}; or pass {OPTION}") from exc
    _state["patched"] = True


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: Any, args: list[str]) -> None:
    _patch(early_config)


def pytest_configure(config: pytest.Config) -> None:
    _patch(config)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    # Which tests reach a replacement: the suite script lists them.
    if not _state["patched"]:
        yield
        return
    from . import nemo_gym as compat

    before = sum(compat.calls.values())
    yield
    if sum(compat.calls.values()) != before:
        _state.setdefault("exercised", []).append(item.nodeid)


def pytest_report_header(config: pytest.Config) -> str:
    if _state["patched"]:
        from . import nemo_gym as compat

        return f"tokenwire: NeMo-Gym {compat.nemo_gym_version()} patched with tokenwire.compat.nemo_gym"
    return f"tokenwire: NeMo-Gym not patched ({_state['disabled'] or 'disabled'})"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _state["patched"]:
        return
    from . import nemo_gym as compat

    terminalreporter.write_line(SUMMARY if compat.is_patched() else
                                "tokenwire: NeMo-Gym was unpatched during the session")
    exercised = _state.get("exercised", [])
    terminalreporter.write_line(f"tokenwire: {len(exercised)} tests reached the replacements")
    for nodeid in exercised:
        terminalreporter.write_line(f"tokenwire: exercised {nodeid}")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _state["patched"]:
        from . import nemo_gym as compat

        compat.unpatch()
        _state["patched"] = False
