#!/usr/bin/env python3
"""renderers' own client tests, without and with tokenwire's replacements patched in.

Runs ``tests/test_client.py`` of the renderers sdist twice with
``python -m pytest -q -p no:cacheprovider --rootdir <sdist>``: once as it is, once with
``-p tokenwire.compat.renderers_plugin``. Succeeds when every test that passes without the
patch passes with it, the same tests are skipped for the same reasons, and the patch was in
place for the whole patched run.

    python tests/run_renderers_suite.py                       # downloads the sdist with pip
    python tests/run_renderers_suite.py --sdist renderers-0.1.13.dev13.tar.gz
    python tests/run_renderers_suite.py --sdist /path/to/renderers-0.1.13.dev13  # extracted

``--sdist`` (the archive, its extracted directory, or a directory holding the archive, as
``pip download -d`` leaves it) may also come from ``TOKENWIRE_RENDERERS_SDIST``. Exit status: 0 the patched run
matches, 1 it does not, 2 the suite could not be run (no sdist, renderers not importable).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

VERSION = "0.1.13.dev13"
SUITE = "tests/test_client.py"
PLUGIN = "tokenwire.compat.renderers_plugin"
# What the plugin prints when the patch was in place from collection to the end.
PATCHED_MARK = "tokenwire: renderers.client stayed patched for the whole session"


class SuiteUnavailable(RuntimeError):
    """The sdist or renderers itself is not available here."""


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
    unpatched: Run
    patched: Run
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def report(self) -> str:
        lines = [
            f"renderers {VERSION} {SUITE}",
            f"  unpatched: {self.unpatched.summary()}",
            f"  patched:   {self.patched.summary()}",
        ]
        lines += [f"  PROBLEM: {p}" for p in self.problems]
        lines.append("  OK: every test that passes unpatched passes patched, with the same skips"
                     if self.ok else "  FAILED")
        return "\n".join(lines)


def download(dest: Path, python: str = sys.executable, timeout: float = 120) -> Path:
    """The renderers sdist, fetched with pip into ``dest``."""
    command = [python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", "-q", f"renderers=={VERSION}", "-d", str(dest)]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=timeout)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = getattr(exc, "stderr", "") or ""
        raise SuiteUnavailable(f"pip download renderers=={VERSION} failed: {detail.strip()[-500:]}") from exc
    found = sorted(dest.glob("renderers-*.tar.gz"))
    if not found:
        raise SuiteUnavailable(f"pip download left no renderers sdist in {dest}")
    return found[0]


def extract(archive: Path, dest: Path) -> Path:
    """Unpack the sdist (no member may leave ``dest``) and return its top directory."""
    with tarfile.open(archive) as tar:
        root = dest.resolve()
        for member in tar.getmembers():
            target = (dest / member.name).resolve()
            if root not in target.parents and target != root:
                raise SuiteUnavailable(f"{archive}: member {member.name!r} leaves the archive")
            if member.issym() or member.islnk() or member.isdev():
                raise SuiteUnavailable(f"{archive}: member {member.name!r} is a link or device")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - Python without extraction filters
            tar.extractall(dest)
    tops = [p for p in dest.iterdir() if p.is_dir() and (p / SUITE).is_file()]
    if len(tops) != 1:
        raise SuiteUnavailable(f"{archive}: no single top directory holding {SUITE}")
    return tops[0]


def sdist_root(sdist: str | None, workdir: Path, python: str = sys.executable) -> Path:
    """The extracted sdist: ``sdist`` (an archive or a directory) or a fresh download."""
    if sdist:
        path = Path(sdist)
        if path.is_dir() and not (path / SUITE).is_file():
            archives = sorted(path.glob(f"renderers-{VERSION}.tar.gz"))
            if not archives:
                raise SuiteUnavailable(f"{path} holds neither {SUITE} nor renderers-{VERSION}.tar.gz")
            path = archives[0]
        if path.is_dir():
            return path
        if not path.is_file():
            raise SuiteUnavailable(f"no such sdist: {path}")
        (workdir / "src").mkdir(parents=True, exist_ok=True)
        return extract(path, workdir / "src")
    (workdir / "download").mkdir(parents=True, exist_ok=True)
    (workdir / "src").mkdir(parents=True, exist_ok=True)
    return extract(download(workdir / "download", python), workdir / "src")


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


def run_pytest(root: Path, junit: Path, *, patched: bool, python: str = sys.executable,
               extra: list[str] | None = None, timeout: float = 600) -> Run:
    command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root),
               "-rA", f"--junitxml={junit}", SUITE]
    if patched:
        command[3:3] = ["-p", PLUGIN]
    command += extra or []
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTEST_ADDOPTS", None)  # both runs exactly as written here
    env.pop("TOKENWIRE_RENDERERS_PATCH", None)
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    if not junit.is_file():
        raise SuiteUnavailable(f"pytest wrote no results (exit {done.returncode}):\n{output[-2000:]}")
    outcomes, skips = parse_junit(junit)
    return Run(outcomes, skips, output, done.returncode)


def compare(unpatched: Run, patched: Run) -> Comparison:
    result = Comparison(unpatched, patched)
    problems = result.problems
    if not unpatched.outcomes:
        problems.append("the unpatched run collected no tests")
    if PATCHED_MARK not in patched.output:
        problems.append("the patched run does not report the patch in place for the whole session")
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
    return result


def run_suite(sdist: str | None = None, *, python: str = sys.executable, extra: list[str] | None = None,
              workdir: Path | None = None) -> Comparison:
    """Both runs and their comparison. Raises :class:`SuiteUnavailable` when the suite
    cannot run here."""
    probe = subprocess.run([python, "-c", "import renderers.client, tokenwire.compat.renderers"],
                           capture_output=True, text=True)
    if probe.returncode:
        raise SuiteUnavailable(f"renderers or tokenwire is not importable by {python}: {probe.stderr.strip()[-500:]}")
    with tempfile.TemporaryDirectory(prefix="tokenwire-renderers-") as tmp:
        work = Path(workdir or tmp)
        root = sdist_root(sdist, work, python)
        unpatched = run_pytest(root, work / "unpatched.xml", patched=False, python=python, extra=extra)
        patched = run_pytest(root, work / "patched.xml", patched=True, python=python, extra=extra)
        return compare(unpatched, patched)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", default=os.environ.get("TOKENWIRE_RENDERERS_SDIST"),
                        help="renderers sdist (.tar.gz) or its extracted directory; default: pip download")
    parser.add_argument("--python", default=sys.executable, help="interpreter to run pytest with")
    parser.add_argument("--verbose", action="store_true", help="print both runs' output")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    try:
        result = run_suite(args.sdist, python=args.python, extra=args.pytest_args)
    except SuiteUnavailable as exc:
        print(f"renderers suite unavailable: {exc}", file=sys.stderr)
        return 2
    if args.verbose or not result.ok:
        for label, run in (("unpatched", result.unpatched), ("patched", result.patched)):
            print(f"----- {label} run (exit {run.returncode}) -----")
            print(run.output[-6000:])
    print(result.report())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
