"""pytest plugin: a test session with tokenwire's parsers patched into ``renderers.client``.

    python -m pytest -p tokenwire.compat.renderers_plugin tests/

The patch is applied while pytest loads its initial conftest files, before any conftest or
test module runs ``from renderers.client import ...``, and removed when the session ends.
Disable it with ``--tokenwire-no-patch`` or ``TOKENWIRE_RENDERERS_PATCH=0``.

The header of the run says whether the patch is active; the terminal summary says whether it
was still in place at the end (a test that unpatches it is reported) and which renderers
release the drop-in followed.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

ENV = "TOKENWIRE_RENDERERS_PATCH"
OPTION = "--tokenwire-no-patch"
HEADER = "tokenwire: renderers.client patched with tokenwire.compat.renderers"
SUMMARY = "tokenwire: renderers.client stayed patched for the whole session"

_state: dict[str, Any] = {"patched": False, "disabled": None}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tokenwire")
    group.addoption(
        OPTION,
        action="store_true",
        default=False,
        help=f"do not patch renderers.client with tokenwire's parsers (also: {ENV}=0)",
    )


def _disabled(config: pytest.Config) -> str | None:
    """Why the patch is off, or None when it is wanted."""
    if os.environ.get(ENV, "").strip().lower() in ("0", "false", "no", "off"):
        return f"{ENV}={os.environ[ENV]}"
    namespace = getattr(config, "known_args_namespace", None)
    if getattr(namespace, "tokenwire_no_patch", False):
        return OPTION
    try:
        if config.getoption("tokenwire_no_patch"):
            return OPTION
    except (ValueError, AttributeError):
        pass
    return None


def _patch(config: pytest.Config) -> None:
    if _state["patched"]:
        return
    reason = _disabled(config)
    _state["disabled"] = reason
    if reason is not None:
        return
    from . import renderers as compat

    try:
        compat.patch()
    except ImportError as exc:
        raise pytest.UsageError(
            f"tokenwire.compat.renderers_plugin: renderers is not importable ({exc}); "
            f"install renderers or pass {OPTION}"
        ) from exc
    except RuntimeError as exc:  # a renderers release the drop-in does not know
        raise pytest.UsageError(f"tokenwire.compat.renderers_plugin: {exc}; or pass {OPTION}") from exc
    _state["patched"] = True


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: Any, args: list[str]) -> None:
    # Before conftest files and test modules import renderers' names.
    _patch(early_config)


def pytest_configure(config: pytest.Config) -> None:
    # For a plugin registered too late for the hook above (pytest_plugins in a conftest).
    _patch(config)


def pytest_report_header(config: pytest.Config) -> str:
    import tokenwire

    if _state["patched"]:
        from . import renderers as compat

        return (f"{HEADER} (tokenwire {tokenwire.__version__}, implementation {tokenwire.implementation}, "
                f"renderers {compat.renderers_version()})")
    return f"tokenwire: renderers.client not patched ({_state['disabled'] or 'disabled'})"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _state["patched"]:
        return
    from . import renderers as compat

    if compat.is_patched():
        terminalreporter.write_line(f"{SUMMARY} (renderers {compat.renderers_version()})")
    else:
        terminalreporter.write_line("tokenwire: renderers.client was unpatched during the session")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _state["patched"]:
        from . import renderers as compat

        compat.unpatch()
        _state["patched"] = False
