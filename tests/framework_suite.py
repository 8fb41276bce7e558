"""What the framework suite scripts (run_nemo_gym_suite.py, run_areal_suite.py) share: one
pytest run of a framework's own tests in its venv, unpatched or with a drop-in's plugin, and
the comparison of the two runs."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from run_renderers_suite import Run, SuiteUnavailable, parse_junit


def environment(root: Path, switch: str) -> dict[str, str]:
    """The environment of a run from ``root`` (on the path), without the plugin's switch
    ``switch`` or the caller's pytest options."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    env.pop("PYTEST_ADDOPTS", None)
    env.pop(switch, None)
    return env


def run(root: Path, junit: Path, python: str, *, plugin: str | None, switch: str, targets: list[str],
        extra: list[str] | None = None, preload: list[str] | None = None) -> Run:
    """pytest over ``targets`` from ``root``, with ``-p plugin`` when given (and ``-p`` of each
    module of ``preload`` in both runs, before it)."""
    command = [python, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(root), "-q", "-rA",
               "-o", "addopts=", "-W", "ignore", f"--junitxml={junit}", *targets, *(extra or [])]
    plugins = [*(preload or []), *([plugin] if plugin else [])]
    command[3:3] = [arg for name in plugins for arg in ("-p", name)]
    done = subprocess.run(command, cwd=root, env=environment(root, switch), capture_output=True, text=True,
                          timeout=3600)
    output = done.stdout + done.stderr
    if not junit.is_file():
        raise SuiteUnavailable(f"pytest wrote no results (exit {done.returncode}):\n{output[-2000:]}")
    outcomes, skips = parse_junit(junit)
    return Run(outcomes, skips, output, done.returncode)


def compare(before: Run, after: Run, summary: str) -> list[str]:
    """What keeps the patched run from agreeing with the unpatched one: every test that passes
    unpatched passes patched, the same skips, and the plugin's ``summary`` line printed."""
    problems = []
    if not before.outcomes:
        problems.append("the unpatched run collected no tests")
    if summary not in after.output:
        problems.append("the patched run does not report the patch in place for the whole session")
    for name in sorted(set(before.outcomes) | set(after.outcomes)):
        a, b = before.outcomes.get(name), after.outcomes.get(name)
        if a is None or b is None:
            problems.append(f"{name}: only in the {'patched' if a is None else 'unpatched'} run")
        elif a == "passed" and b != "passed":
            problems.append(f"{name}: passes unpatched, {b} patched")
        elif (a == "skipped") != (b == "skipped"):
            problems.append(f"{name}: {a} unpatched, {b} patched")
    return problems


def report(title: str, live_title: str, before: Run, after: Run, live: Run, summary: str,
           verbose: bool) -> int:
    """Print both runs, the tests that reached the drop-in, the live test's ``DEFECT`` rows, and
    return the exit status: 0 the runs agree and the live test passes, else 1."""
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


def copy_live(live: Path, work: Path) -> Path:
    """A copy of the live test ``live`` (and the server it imports) in ``work``/live, outside
    tokenwire's tests/ (whose conftest needs tokenwire's test extras)."""
    (work / "live").mkdir()
    for source in (live, live.parent / "live_server.py"):
        (work / "live" / source.name).write_bytes(source.read_bytes())
    return work / "live" / live.name
