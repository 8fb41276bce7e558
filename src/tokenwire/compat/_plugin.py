"""The pytest hooks of a framework drop-in's plugin (``tokenwire.compat.<framework>_plugin``):
patch while pytest loads its initial conftest files, say so in the header, report at the end
whether the patch stayed in place, unpatch when the session ends.

A plugin module calls :func:`hooks` and puts what it returns in its namespace; the drop-in
module it names has ``patch()``, ``unpatch()``, ``is_patched()`` and a ``version()`` string.
A drop-in that counts its calls can have the plugin list the tests that made them.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

import pytest


def count_calls(compat: Any) -> int:
    """A drop-in's calls so far: the sum of its ``calls`` counter (for :func:`hooks`)."""
    return sum(compat.calls.values())


def exercised(compat: Any, reached: list[tuple[str, int]]) -> list[str]:
    """The summary's lines on the tests that reached the replacements (for :func:`hooks`),
    the ``tokenwire: exercised`` lines the suite scripts count."""
    return [f"tokenwire: {len(reached)} tests reached the replacements",
            *(f"tokenwire: exercised {nodeid}" for nodeid, _ in reached)]


def hooks(framework: str, target: str, env: str, version: str, *, option: str = "--tokenwire-no-patch",
          label: str | None = None, header: str | None = None, calls: Callable[[Any], int] | None = None,
          report: Callable[[Any, list[tuple[str, int]]], list[str]] | None = None,
          detail: Callable[[Any], str] | None = None) -> dict[str, Any]:
    """The hooks for the drop-in ``tokenwire.compat.<framework>`` patching ``target`` (said in
    the messages), turned off by ``option`` or ``<env>=0``; ``version`` names the drop-in's
    function giving the release it follows, ``label`` the framework in the messages (its
    module name by default), ``header`` what the header says is patched (``target``).

    With ``calls`` (the drop-in module -> how many calls its replacements have had) each
    test that made some is recorded as ``(node id, calls)``; ``report(module, those)`` gives
    the lines the terminal summary adds about them, ``detail(module)`` what it adds after the
    release in its line saying the patch stayed in place."""
    label = label or framework
    dest = option.lstrip("-").replace("-", "_")
    header = f"tokenwire: {header or target} patched with tokenwire.compat.{framework}"
    summary = f"tokenwire: {target} stayed patched for the whole session"
    state: dict[str, Any] = {"patched": False, "disabled": None, "reached": []}

    def compat() -> Any:
        return importlib.import_module(f"tokenwire.compat.{framework}")

    def disabled(config: pytest.Config) -> str | None:
        if os.environ.get(env, "").strip().lower() in ("0", "false", "no", "off"):
            return f"{env}={os.environ[env]}"
        namespace = getattr(config, "known_args_namespace", None)
        if getattr(namespace, dest, False):
            return option
        try:
            if config.getoption(dest):
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
            raise pytest.UsageError(f"tokenwire.compat.{framework}_plugin: {label} is not importable "
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

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item: pytest.Item) -> Any:
        if calls is None or not state["patched"]:
            yield
            return
        before = calls(compat())
        yield
        made = calls(compat()) - before
        if made:
            state["reached"].append((item.nodeid, made))

    def pytest_report_header(config: pytest.Config) -> str:
        if state["patched"]:
            import tokenwire

            return (f"{header} (tokenwire {tokenwire.__version__}, implementation {tokenwire.implementation}, "
                    f"{label} {getattr(compat(), version)()})")
        return f"tokenwire: {target} not patched ({state['disabled'] or 'disabled'})"

    def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if state["patched"]:
            module = compat()
            if module.is_patched():
                more = detail(module) if detail is not None else ""
                terminalreporter.write_line(f"{summary} ({label} {getattr(module, version)()}{more})")
                for line in report(module, state["reached"]) if report is not None else ():
                    terminalreporter.write_line(line)
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
        "pytest_runtest_call": pytest_runtest_call,
        "pytest_report_header": pytest_report_header,
        "pytest_terminal_summary": pytest_terminal_summary,
        "pytest_unconfigure": pytest_unconfigure,
    }
