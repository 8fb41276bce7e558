"""What the framework-suite scripts share: a pytest run of a framework's tests read back from
its JUnit XML, and the test-by-test comparison of an unpatched run with a patched one.

Used by run_renderers_suite.py, run_eval_protocol_suite.py, run_nemo_gym_suite.py,
run_areal_suite.py and run_compat_suite.py (each runs the framework's own tests without and with
a drop-in's plugin); the NeMo-Gym and AReaL scripts also run a live test against a local server
(:func:`copy_live`, :func:`report_live`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class SuiteUnavailable(RuntimeError):
    """The sdist or the framework itself is not available here."""


@dataclass
class Run:
    """One pytest run: each test's outcome (``passed``, ``failed``, ``error``, ``skipped``)
    and, for skips, the reason."""

    outcomes: dict[str, str]
    skips: dict[str, str]
    output: str
    returncode: int

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.outcomes.values() if o == outcome)

    def summary(self) -> str:
        parts = [f"{self.count(o)} {o}" for o in ("passed", "skipped", "failed", "error")]
        return ", ".join(parts)


@dataclass
class Comparison:
    """An unpatched run and a patched run of one release's tests, and what the patched one
    got wrong (:func:`differences`, and the plugin's marks)."""

    unpatched: Run
    patched: Run
    version: str = "?"
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def title(self) -> str:
        return f"release {self.version}"

    def details(self) -> list[str]:
        return []

    def report(self) -> str:
        lines = [self.title(), f"  unpatched: {self.unpatched.summary()}", f"  patched:   {self.patched.summary()}",
                 *self.details()]
        lines += [f"  PROBLEM: {p}" for p in self.problems]
        lines.append("  OK: every test that passes unpatched passes patched, with the same skips"
                     if self.ok else "  FAILED")
        return "\n".join(lines)


def parse_junit(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    outcomes: dict[str, str] = {}
    skips: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        children = {child.tag: child for child in case}
        if "failure" in children:
            outcome = "failed"
        elif "error" in children:
            outcome = "error"
        elif "skipped" in children:
            outcome = "skipped"
            skips[name] = children["skipped"].get("message", "")
        else:
            outcome = "passed"
        # A test reported twice (a teardown error after a pass) keeps its worst outcome.
        if outcomes.get(name) not in ("failed", "error"):
            outcomes[name] = outcome
    return outcomes, skips


def environment(path: Iterable[str] = (), drop: Iterable[str] = ()) -> dict[str, str]:
    """This environment with ``path`` first on PYTHONPATH, without PYTEST_ADDOPTS nor ``drop``
    (the plugins' switches), so that both runs are exactly as the script writes them."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*path, env.get("PYTHONPATH")]))
    for name in ("PYTEST_ADDOPTS", *drop):
        env.pop(name, None)
    return env


def run_pytest(python: str, root: Path, junit: Path, targets: list[str], *, env: dict[str, str],
               plugin: str | None = None, options: Iterable[str] = (), timeout: float = 600,
               preload: Iterable[str] = ()) -> Run:
    """``python -m pytest`` of ``targets`` from ``root`` (its rootdir), with ``-p plugin`` when
    given (after ``-p`` of each module of ``preload``), read back from the JUnit XML it writes
    to ``junit``."""
    plugins = [*preload, *([plugin] if plugin else [])]
    command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *(a for name in plugins for a in ("-p", name)),
               "--rootdir", str(root), "-rA", f"--junitxml={junit}", *options, *targets]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    if not junit.is_file():
        raise SuiteUnavailable(f"pytest wrote no results (exit {done.returncode}):\n{output[-2000:]}")
    outcomes, skips = parse_junit(junit)
    return Run(outcomes, skips, output, done.returncode)


def run_framework(python: str, root: Path, junit: Path, targets: list[str], *, switch: str,
                  plugin: str | None = None, preload: Iterable[str] = ()) -> Run:
    """One run of the NeMo-Gym or AReaL suite script: pytest from ``root`` (first on the path),
    without the plugin's ``switch`` in the environment, the suite's addopts or its warnings."""
    return run_pytest(python, root, junit, targets, env=environment([str(root)], [switch]), plugin=plugin,
                      options=["-o", "addopts=", "-W", "ignore"], timeout=3600, preload=preload)


def differences(unpatched: Run, patched: Run) -> list[str]:
    """Where the patched run falls short of the unpatched one: a test that passed and no longer
    does, a skip gained, lost or given another reason, a test in one run only, other counts."""
    problems = []
    if not unpatched.outcomes:
        problems.append("the unpatched run collected no tests")
    for outcome in ("passed", "skipped"):
        if unpatched.count(outcome) != patched.count(outcome):
            problems.append(f"{unpatched.count(outcome)} {outcome} unpatched, {patched.count(outcome)} patched")
    for name in sorted(set(unpatched.outcomes) | set(patched.outcomes)):
        before, after = unpatched.outcomes.get(name), patched.outcomes.get(name)
        if before is None or after is None:
            problems.append(f"{name}: only in the {'patched' if before is None else 'unpatched'} run")
        elif before == "passed" and after != "passed":
            problems.append(f"{name}: passes unpatched, {after} patched")
        elif (before == "skipped") != (after == "skipped"):
            problems.append(f"{name}: {before} unpatched, {after} patched")
        elif before == "skipped" and unpatched.skips[name] != patched.skips[name]:
            problems.append(f"{name}: skipped for another reason ({unpatched.skips[name]!r} vs {patched.skips[name]!r})")
    return problems


def show(result: Comparison, verbose: bool, tail: int = 3000) -> bool:
    """Print a comparison's report (with both runs' last ``tail`` characters of output when
    ``verbose`` or when it failed); whether it is ok."""
    if verbose or not result.ok:
        for label, run in (("unpatched", result.unpatched), ("patched", result.patched)):
            print(f"----- {result.version} {label} run (exit {run.returncode}) -----\n{run.output[-tail:]}")
    print(result.report())
    return result.ok


def compare(unpatched: Run, patched: Run, summary: str) -> list[str]:
    """:func:`differences`, and the plugin's ``summary`` line missing from the patched run."""
    problems = differences(unpatched, patched)
    if summary not in patched.output:
        problems.append("the patched run does not report the patch in place for the whole session")
    return problems


def copy_live(live: Path, work: Path) -> Path:
    """A copy of the live test ``live`` (and canned_http.py, whose server it imports) in
    ``work``/live, outside tokenwire's tests/ (whose conftest needs tokenwire's test extras)."""
    (work / "live").mkdir()
    for source in (live, Path(__file__).with_name("canned_http.py")):
        (work / "live" / source.name).write_bytes(source.read_bytes())
    return work / "live" / live.name


def report_live(title: str, live_title: str, before: Run, after: Run, live: Run, summary: str,
                verbose: bool) -> int:
    """Print both runs, the tests that reached the drop-in (the plugin's ``tokenwire:
    exercised`` lines), the live test's ``DEFECT`` rows, and return the exit status: 0 the runs
    agree (:func:`compare`) and the live test passes, else 1."""
    problems = compare(before, after, summary)
    exercised = re.findall(r"^tokenwire: exercised (\S+)", after.output, re.M)
    print(title)
    print(f"  unpatched: {before.summary()}")
    print(f"  patched:   {after.summary()}")
    print(f"  tests that reached the replacements: {len(exercised)}")
    if verbose:
        for name in exercised:
            print(f"    {name}")
    for line in problems:
        print(f"  PROBLEM: {line}")
    print(f"{live_title}: {live.summary()}")
    for line in re.findall(r"^DEFECT (.*)$", live.output, re.M):
        print(f"  {line}")
    failed = live.count("failed") or live.count("error")
    if verbose or problems or failed:
        print(live.output[-3000:] if failed else "")
    ok = not problems and not failed and live.count("passed")
    print("  OK" if ok else "  FAILED")
    return 0 if ok else 1


def run_live_suite(framework: str, version: str, python: str, root: Callable[[Path], Path], suite: Sequence[str],
                   live: Path, live_title: str, *, drop_in: str, verbose: bool, preload: Iterable[str] = ()) -> int:
    """The NeMo-Gym and AReaL scripts' run in a temporary folder ``work``: ``suite`` from
    ``root(work)`` unpatched and with the plugin of ``tokenwire.compat.<drop_in>`` (its switch
    ``TOKENWIRE_<DROP_IN>_PATCH`` set in both runs, its summary line looked for), then the live
    test (:func:`copy_live`); the exit status of :func:`report_live`, or 2 when the suite
    cannot run."""
    plugin, switch = f"tokenwire.compat.{drop_in}_plugin", f"TOKENWIRE_{drop_in.upper()}_PATCH"
    summary = f"tokenwire: {framework} stayed patched for the whole session"
    with tempfile.TemporaryDirectory(prefix="tokenwire-suite-") as tmp:
        work = Path(tmp)
        common = dict(switch=switch, preload=tuple(preload))
        try:
            top = root(work)
            before = run_framework(python, top, work / "unpatched.xml", list(suite), **common)
            after = run_framework(python, top, work / "patched.xml", list(suite), plugin=plugin, **common)
            live_run = run_framework(python, top, work / "live.xml", [str(copy_live(live, work)), "-s"], **common)
        except (SuiteUnavailable, subprocess.SubprocessError, StopIteration) as exc:
            print(f"{framework} suite unavailable: {exc}", file=sys.stderr)
            return 2
        return report_live(f"{framework} {version} suite ({', '.join(suite)})", live_title, before, after,
                           live_run, summary, verbose)
