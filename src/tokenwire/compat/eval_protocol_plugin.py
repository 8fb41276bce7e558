"""pytest plugin: a test session with eval-protocol's Fireworks completions client on tokenwire.

    python -m pytest -p tokenwire.compat.eval_protocol_plugin tests/

The patch (:func:`tokenwire.compat.eval_protocol.patch`) is applied while pytest loads its
initial conftest files, before any test module imports eval-protocol's client, and removed
when the session ends. Disable it with ``--tokenwire-no-eval-protocol-patch`` or
``TOKENWIRE_EVAL_PROTOCOL_PATCH=0``. The header says whether the patch is active; the
terminal summary says whether it was still in place at the end, and how many calls went
through the patched method.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

ENV = "TOKENWIRE_EVAL_PROTOCOL_PATCH"
OPTION = "--tokenwire-no-eval-protocol-patch"
HEADER = "tokenwire: eval-protocol's FireworksV1CompletionsClient patched with tokenwire.compat.eval_protocol"
SUMMARY = "tokenwire: eval-protocol's client stayed patched for the whole session"
CALLERS = "tokenwire: tests that ran the patched method:"

_state: dict[str, Any] = {"patched": False, "disabled": None, "callers": []}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("tokenwire").addoption(
        OPTION, action="store_true", default=False,
        help=f"do not patch eval-protocol's Fireworks completions client (also: {ENV}=0)")


def _disabled(config: pytest.Config) -> str | None:
    if os.environ.get(ENV, "").strip().lower() in ("0", "false", "no", "off"):
        return f"{ENV}={os.environ[ENV]}"
    namespace = getattr(config, "known_args_namespace", None)
    if getattr(namespace, "tokenwire_no_eval_protocol_patch", False):
        return OPTION
    return None


def _patch(config: pytest.Config) -> None:
    if _state["patched"]:
        return
    _state["disabled"] = reason = _disabled(config)
    if reason is not None:
        return
    from . import eval_protocol as compat

    try:
        compat.patch()
    except ImportError as exc:
        raise pytest.UsageError(f"tokenwire.compat.eval_protocol_plugin: eval-protocol is not importable ({exc}); "
                                f"install it or pass {OPTION}") from exc
    except RuntimeError as exc:
        raise pytest.UsageError(f"tokenwire.compat.eval_protocol_plugin: {exc}; or pass {OPTION}") from exc
    compat.calls = 0
    _state["patched"] = True


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: Any, args: list[str]) -> None:
    _patch(early_config)


def pytest_configure(config: pytest.Config) -> None:
    _patch(config)  # a plugin registered too late for the hook above


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    # Which tests ran the patched method (eval-protocol's tests that exercise the patched path).
    if not _state["patched"]:
        yield
        return
    from . import eval_protocol as compat

    before = compat.calls
    yield
    if compat.calls != before:
        _state["callers"].append(f"{item.nodeid} ({compat.calls - before})")


def pytest_report_header(config: pytest.Config) -> str:
    if not _state["patched"]:
        return f"tokenwire: eval-protocol's client not patched ({_state['disabled'] or 'disabled'})"
    import tokenwire

    from . import eval_protocol as compat

    return (f"{HEADER} (tokenwire {tokenwire.__version__}, implementation {tokenwire.implementation}, "
            f"eval-protocol {compat.eval_protocol_version()})")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _state["patched"]:
        return
    from . import eval_protocol as compat

    if compat.is_patched():
        terminalreporter.write_line(f"{SUMMARY} (eval-protocol {compat.eval_protocol_version()}; "
                                    f"{compat.calls} calls of the patched method)")
        callers = _state["callers"]
        terminalreporter.write_line(f"{CALLERS} {len(callers)}" + "".join(f"\n  {c}" for c in callers))
    else:
        terminalreporter.write_line("tokenwire: eval-protocol's client was unpatched during the session")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _state["patched"]:
        from . import eval_protocol as compat

        compat.unpatch()
        _state["patched"] = False
