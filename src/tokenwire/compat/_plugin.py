"""The pytest hooks of a framework drop-in's plugin (``tokenwire.compat.<framework>_plugin``):
patch while pytest loads its initial conftest files, say so in the header, report at the end
whether the patch stayed in place, unpatch when the session ends.

A plugin module calls :func:`hooks` and puts what it returns in its namespace; the drop-in
module it names has ``patch()``, ``unpatch()``, ``is_patched()`` and a ``version()`` string.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest


def hooks(framework: str, target: str, env: str, version: str) -> dict[str, Any]:
    """The hooks for the drop-in ``tokenwire.compat.<framework>`` patching ``target`` (said in
    the messages), turned off by ``--tokenwire-no-patch`` or ``<env>=0``; ``version`` names
    the drop-in's function giving the release it follows."""
    option = "--tokenwire-no-patch"
    header = f"tokenwire: {target} patched with tokenwire.compat.{framework}"
    summary = f"tokenwire: {target} stayed patched for the whole session"
    state: dict[str, Any] = {"patched": False, "disabled": None}

    def compat() -> Any:
        return importlib.import_module(f"tokenwire.compat.{framework}")

    def disabled(config: pytest.Config) -> str | None:
        if os.environ.get(env, "").strip().lower() in ("0", "false", "no", "off"):
            return f"{env}={os.environ[env]}"
        namespace = getattr(config, "known_args_namespace", None)
        if getattr(namespace, "tokenwire_no_patch", False):
            return option
        try:
            if config.getoption("tokenwire_no_patch"):
                return option
        except (ValueError, AttributeError):
            pass
        return None

    def apply(config: pytest.Config) -> None:
        if state["patched"]:
            return
        state["disabled"] = reason = disabled(config)
        if reason is not None:
            return
        try:
            compat().patch()
        except ImportError as exc:
            raise pytest.UsageError(f"tokenwire.compat.{framework}_plugin: {framework} is not importable "
                                    f"({exc}); install it or pass {option}") from exc
        except RuntimeError as exc:  # a release the drop-in does not know
            raise pytest.UsageError(f"tokenwire.compat.{framework}_plugin: {exc}; or pass {option}") from exc
        state["patched"] = True

    def pytest_addoption(parser: pytest.Parser) -> None:
        parser.getgroup("tokenwire").addoption(
            option, action="store_true", default=False,
            help=f"do not patch {target} with tokenwire's parsers (also: {env}=0)")

    @pytest.hookimpl(tryfirst=True)
    def pytest_load_initial_conftests(early_config: pytest.Config, parser: Any, args: list[str]) -> None:
        apply(early_config)

    def pytest_configure(config: pytest.Config) -> None:
        apply(config)

    def pytest_report_header(config: pytest.Config) -> str:
        if state["patched"]:
            import tokenwire

            return (f"{header} (tokenwire {tokenwire.__version__}, implementation {tokenwire.implementation}, "
                    f"{framework} {getattr(compat(), version)()})")
        return f"tokenwire: {target} not patched ({state['disabled'] or 'disabled'})"

    def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if state["patched"]:
            if compat().is_patched():
                terminalreporter.write_line(f"{summary} ({framework} {getattr(compat(), version)()})")
            else:
                terminalreporter.write_line(f"tokenwire: {target} was unpatched during the session")

    def pytest_unconfigure(config: pytest.Config) -> None:
        if state["patched"]:
            compat().unpatch()
            state["patched"] = False

    return {
        "ENV": env, "OPTION": option, "HEADER": header, "SUMMARY": summary,
        "pytest_addoption": pytest_addoption,
        "pytest_load_initial_conftests": pytest_load_initial_conftests,
        "pytest_configure": pytest_configure,
        "pytest_report_header": pytest_report_header,
        "pytest_terminal_summary": pytest_terminal_summary,
        "pytest_unconfigure": pytest_unconfigure,
    }
