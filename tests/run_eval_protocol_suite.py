#!/usr/bin/env python3
"""eval-protocol's own test suite, without and with tokenwire's drop-in patched in, then
tokenwire's own eval-protocol tests (``tests/test_compat_eval_protocol.py``), in an environment
where eval-protocol is installed.

Runs the ``tests/`` of the eval-protocol sdist (each release of
``tokenwire.compat.eval_protocol.SUPPORTED_VERSIONS``; the installed release must be the
sdist's) twice with ``python -m pytest -q -p no:cacheprovider --rootdir <sdist>``, the sdist's
``eval_protocol`` package first on the path: once as it is, once with
``-p tokenwire.compat.eval_protocol_plugin``. It succeeds when every test that passes unpatched
passes patched, the same tests are skipped for the same reasons, the patch was in place for
the whole patched run, and tokenwire's eval-protocol tests pass. The patched run lists the
tests of eval-protocol that went through the patched method.

    /work/venvs/eval-protocol/bin/python tests/run_eval_protocol_suite.py
    ... --sdist eval_protocol-0.3.33.tar.gz      # or its extracted directory
    ... --only tests/test_fireworks_v1_completions_client.py   # a part of the suite
    ... --no-tokenwire-tests

eval-protocol is too heavy for CI's environment (litellm, mcp, anthropic, fastapi, ...): run this
before each release, in a virtualenv holding ``eval-protocol==0.3.33`` and tokenwire (editable
from the checkout). Exit status: 0 all matched, 1 a run did not, 2 a suite could not be run.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

try:
    from . import run_renderers_suite as _suite
except ImportError:  # run as a script: tests/ is on the path
    import run_renderers_suite as _suite  # type: ignore[no-redef]

Run = _suite.Run
SuiteUnavailable = _suite.SuiteUnavailable
PACKAGE = "eval-protocol"
PLUGIN = "tokenwire.compat.eval_protocol_plugin"
PATCHED_MARK = "tokenwire: eval-protocol's client stayed patched for the whole session"
FOLLOWED = re.compile(re.escape(PATCHED_MARK) + r" \(eval-protocol (\S+); (\d+) calls")
CALLERS = re.compile(r"tokenwire: tests that ran the patched method: (\d+)((?:\n  .*)*)")
HERE = Path(__file__).resolve().parent


def versions() -> tuple[str, ...]:
    from tokenwire.compat.eval_protocol import SUPPORTED_VERSIONS

    return SUPPORTED_VERSIONS


@dataclass
class Comparison:
    unpatched: Run
    patched: Run
    version: str = "?"
    callers: list[str] = field(default_factory=list)
    calls: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def report(self) -> str:
        lines = [f"eval-protocol {self.version} tests/ (its own suite)",
                 f"  unpatched: {self.unpatched.summary()}",
                 f"  patched:   {self.patched.summary()}",
                 f"  tests that ran the patched method ({self.calls} calls): {len(self.callers)}"]
        lines += [f"    {c}" for c in self.callers]
        both = sorted(name for name, outcome in self.unpatched.outcomes.items()
                      if outcome in ("failed", "error") and self.patched.outcomes.get(name) == outcome)
        lines.append(f"  failing or erring both ways (this environment: network, optional dependencies): {len(both)}")
        lines += [f"    {name} ({self.unpatched.outcomes[name]})" for name in both]
        lines += [f"  PROBLEM: {p}" for p in self.problems]
        lines.append("  OK: every test that passes unpatched passes patched, with the same skips"
                     if self.ok else "  FAILED")
        return "\n".join(lines)


def sdist_root(sdist: str | None, work: Path, version: str, python: str) -> Path:
    """The extracted eval-protocol sdist: ``sdist`` (archive or directory), else downloaded."""
    path = Path(sdist) if sdist else None
    if path is not None and path.is_dir() and (path / "tests").is_dir():
        return path
    if path is None or not path.is_file():
        if path is not None:
            raise SuiteUnavailable(f"no such sdist: {sdist}")
        command = [python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                   "--disable-pip-version-check", "-q", f"{PACKAGE}=={version}", "-d", str(work / "download")]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        found = sorted((work / "download").glob(f"eval_protocol-{version}.tar.gz"))
        if done.returncode or not found:
            raise SuiteUnavailable(f"pip download {PACKAGE}=={version} failed: {done.stderr.strip()[-500:]}")
        path = found[0]
    dest = work / "src"
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path) as tar:
        tar.extractall(dest, filter="data")  # members leaving dest, links out and devices refused
    tops = [p for p in dest.iterdir() if (p / "tests").is_dir() and (p / "eval_protocol").is_dir()]
    if len(tops) != 1:
        raise SuiteUnavailable(f"{path}: no single top directory holding tests/ and eval_protocol/")
    return tops[0]


def environment(root: Path | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    for name in ("PYTEST_ADDOPTS", "TOKENWIRE_EVAL_PROTOCOL_PATCH", "FIREWORKS_API_KEY"):
        env.pop(name, None)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # litellm's import would fetch a price list
    # eval-protocol's client tests build AsyncFireworks() without a key (its CI has one) and
    # then replace its transport with their own object: a stand-in key, which no request carries
    # off this machine (nothing here reaches Fireworks).
    env["FIREWORKS_API_KEY"] = "tokenwire-suite-stand-in"
    return env


def run_pytest(root: Path, junit: Path, targets: list[str], *, patched: bool, python: str,
               extra: list[str], timeout: float) -> Run:
    # A test module whose optional dependency is missing here fails to import in both runs alike;
    # the other modules still run.
    command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root), "-rA",
               "--continue-on-collection-errors", f"--junitxml={junit}", *targets, *extra]
    if patched:
        command[3:3] = ["-p", PLUGIN]
    done = subprocess.run(command, cwd=root, env=environment(root), capture_output=True, text=True,
                          timeout=timeout)
    output = done.stdout + done.stderr
    if not junit.is_file():
        raise SuiteUnavailable(f"pytest wrote no results (exit {done.returncode}):\n{output[-2000:]}")
    outcomes, skips = _suite.parse_junit(junit)
    return Run(outcomes, skips, output, done.returncode)


def compare(unpatched: Run, patched: Run, version: str) -> Comparison:
    # The renderers script's test-by-test comparison, with this plugin's marks.
    base = _suite.compare(unpatched, patched)
    problems = [p for p in base.problems if "the patched run does not report" not in p]
    result = Comparison(unpatched, patched, version, problems=problems)
    followed = FOLLOWED.search(patched.output)
    if PATCHED_MARK not in patched.output or followed is None:
        problems.append("the patched run does not report the patch in place for the whole session")
    elif followed.group(1) != version:
        problems.append(f"the drop-in followed eval-protocol {followed.group(1)}, not {version}")
    else:
        result.calls = int(followed.group(2))
    callers = CALLERS.search(patched.output)
    if callers:
        result.callers = [line.strip() for line in callers.group(2).splitlines() if line.strip()]
    return result


def run_suite(sdist: str | None, version: str, *, python: str, only: list[str], extra: list[str],
              workdir: Path, timeout: float) -> Comparison:
    root = sdist_root(sdist, workdir, version, python)
    probe = subprocess.run(
        [python, "-c", "import importlib.metadata as m, eval_protocol, tokenwire.compat.eval_protocol as c; "
                       "print(m.version('eval-protocol')); print(eval_protocol.__file__)"],
        cwd=root, env=environment(root), capture_output=True, text=True)
    if probe.returncode:
        raise SuiteUnavailable(f"eval-protocol or tokenwire is not importable by {python}: {probe.stderr.strip()[-500:]}")
    installed, location = (probe.stdout.splitlines() + ["", ""])[:2]
    if installed != version or root.resolve() not in Path(location).resolve().parents:
        raise SuiteUnavailable(f"the sdist's eval-protocol {version} is not the one imported "
                               f"({installed} from {location})")
    targets = only or ["tests"]
    unpatched = run_pytest(root, workdir / "unpatched.xml", targets, patched=False, python=python, extra=extra,
                           timeout=timeout)
    patched = run_pytest(root, workdir / "patched.xml", targets, patched=True, python=python, extra=extra,
                         timeout=timeout)
    return compare(unpatched, patched, version)


def run_own_tests(python: str, timeout: float) -> tuple[bool, str]:
    """tokenwire's tests of the drop-in, which drive eval-protocol's client against a local server."""
    command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
               str(HERE / "test_compat_eval_protocol.py"), str(HERE / "test_compat_openai.py")]
    done = subprocess.run(command, cwd=HERE.parent, env=environment(None), capture_output=True, text=True,
                          timeout=timeout)
    lines = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode == 0, "\n".join(lines[-15:] if done.returncode else lines[-1:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", default=os.environ.get("TOKENWIRE_EVAL_PROTOCOL_SDIST"),
                        help="eval-protocol sdist (.tar.gz) or its extracted directory; default: pip download")
    parser.add_argument("--python", default=sys.executable, help="interpreter (with eval-protocol) to run pytest with")
    parser.add_argument("--only", action="append", default=[], metavar="PATH",
                        help="run these files of the suite instead of all of tests/ (repeatable)")
    parser.add_argument("--no-tokenwire-tests", action="store_true", help="skip tokenwire's own eval-protocol tests")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per pytest run")
    parser.add_argument("--verbose", action="store_true", help="print both runs' output")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    failed = unavailable = False
    with tempfile.TemporaryDirectory(prefix="tokenwire-eval-protocol-") as tmp:
        for version in versions():
            try:
                result = run_suite(args.sdist, version, python=args.python, only=args.only, extra=args.pytest_args,
                                   workdir=Path(tmp), timeout=args.timeout)
            except (SuiteUnavailable, subprocess.TimeoutExpired) as exc:
                print(f"eval-protocol {version}: suite unavailable: {exc}", file=sys.stderr)
                unavailable = True
                continue
            if args.verbose or not result.ok:
                for label, run in (("unpatched", result.unpatched), ("patched", result.patched)):
                    print(f"----- {label} run (exit {run.returncode}) -----\n{run.output[-4000:]}")
            print(result.report())
            failed |= not result.ok
    if not args.no_tokenwire_tests:
        ok, tail = run_own_tests(args.python, args.timeout)
        print(f"tokenwire's eval-protocol and OpenAI SDK tests: {'OK' if ok else 'FAILED'}\n  {tail}")
        failed |= not ok
    return 1 if failed else 2 if unavailable else 0


if __name__ == "__main__":
    sys.exit(main())
