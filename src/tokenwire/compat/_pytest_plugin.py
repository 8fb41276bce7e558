"""The pytest hooks a framework drop-in's plugin module is made of (``<framework>_plugin``).

:func:`install` writes them into the plugin module's namespace: the drop-in's ``patch()``
applied while pytest loads its initial conftest files (before test modules import the
framework's names) and removed when the session ends, a switch to leave it off (an option
and an environment variable), a header, and a terminal summary saying whether the patch
stayed in place for the whole session and which tests reached a replacement (those during
which the drop-in's ``calls`` counter moved).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest


def install(namespace: dict[str, Any], *, drop_in: str, framework: str, version: str, env: str,
            option: str) -> None:
    """Define the hooks in ``namespace`` (a plugin module's ``globals()``) for the drop-in
    module ``drop_in`` (``tokenwire.compat.<x>``, with ``patch``, ``unpatch``, ``is_patched``
    and ``calls``); ``version`` names its function giving the installed release."""
    summary = f"tokenwire: {framework} stayed patched for the whole session"
    dest = option.lstrip("-").replace("-", "_")
    state: dict[str, Any] = {"patched": False, "disabled": None, "exercised": []}

    def compat() -> Any:
        return importlib.import_module(drop_in)

    def pytest_addoption(parser: pytest.Parser) -> None:
        parser.getgroup("tokenwire").addoption(
            option, action="store_true", default=False,
            help=f"do not patch {framework} with tokenwire's drop-in (also: {env}=0)")

    def _patch(config: pytest.Config) -> None:
        if state["patched"]:
            return
        if os.environ.get(env, "").strip().lower() in ("0", "false", "no", "off"):
            state["disabled"] = f"{env}={os.environ[env]}"
            return
        if getattr(getattr(config, "known_args_namespace", None), dest, False):
            state["disabled"] = option
            return
        try:
            compat().patch()
        except (ImportError, RuntimeError) as exc:
            raise pytest.UsageError(f"{drop_in}_plugin: {exc}; or pass {option}") from exc
        state["patched"] = True

    @pytest.hookimpl(tryfirst=True)
    def pytest_load_initial_conftests(early_config: pytest.Config, parser: Any, args: list[str]) -> None:
        _patch(early_config)

    def pytest_configure(config: pytest.Config) -> None:
        _patch(config)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item: pytest.Item) -> Any:
        if not state["patched"]:
            yield
            return
        before = sum(compat().calls.values())
        yield
        if sum(compat().calls.values()) != before:
            state["exercised"].append(item.nodeid)

    def pytest_report_header(config: pytest.Config) -> str:
        if state["patched"]:
            return f"tokenwire: {framework} {getattr(compat(), version)()} patched with {drop_in}"
        return f"tokenwire: {framework} not patched ({state['disabled'] or 'disabled'})"

    def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if not state["patched"]:
            return
        terminalreporter.write_line(summary if compat().is_patched() else
                                    f"tokenwire: {framework} was unpatched during the session")
        terminalreporter.write_line(f"tokenwire: {len(state['exercised'])} tests reached the replacements")
        for nodeid in state["exercised"]:
            terminalreporter.write_line(f"tokenwire: exercised {nodeid}")

    def pytest_unconfigure(config: pytest.Config) -> None:
        if state["patched"]:
            compat().unpatch()
            state["patched"] = False

    namespace.update(
        ENV=env, OPTION=option, SUMMARY=summary, _state=state, _patch=_patch,
        pytest_addoption=pytest_addoption,
        pytest_load_initial_conftests=pytest_load_initial_conftests,
        pytest_configure=pytest_configure, pytest_runtest_call=pytest_runtest_call,
        pytest_report_header=pytest_report_header, pytest_terminal_summary=pytest_terminal_summary,
        pytest_unconfigure=pytest_unconfigure)
