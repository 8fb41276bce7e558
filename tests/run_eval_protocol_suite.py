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
    from . import suite_junit as _junit
except ImportError:  # run as a script: tests/ is on the path
    import suite_junit as _junit  # type: ignore[no-redef]

Run = _junit.Run
SuiteUnavailable = _junit.SuiteUnavailable
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
class Comparison(_junit.Comparison):
    callers: list[str] = field(default_factory=list)
    calls: int = 0

    def title(self) -> str:
        return f"eval-protocol {self.version} tests/ (its own suite)"

    def details(self) -> list[str]:
        lines = [f"  tests that ran the patched method ({self.calls} calls): {len(self.callers)}"]
        lines += [f"    {c}" for c in self.callers]
        both = sorted(name for name, outcome in self.unpatched.outcomes.items()
                      if outcome in ("failed", "error") and self.patched.outcomes.get(name) == outcome)
        lines.append(f"  failing or erring both ways (this environment: network, optional dependencies): {len(both)}")
        return lines + [f"    {name} ({self.unpatched.outcomes[name]})" for name in both]


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
    env = _junit.environment([str(root)] if root is not None else [], ["TOKENWIRE_EVAL_PROTOCOL_PATCH"])
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
    return _junit.run_pytest(python, root, junit, [*targets, *extra], env=environment(root),
                             plugin=PLUGIN if patched else None, options=["--continue-on-collection-errors"],
                             timeout=timeout)


def compare(unpatched: Run, patched: Run, version: str) -> Comparison:
    # The test-by-test comparison, with this plugin's marks.
    result = Comparison(unpatched, patched, version, problems=_junit.differences(unpatched, patched))
    problems = result.problems
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
            failed |= not _junit.show(result, args.verbose, 4000)
    if not args.no_tokenwire_tests:
        ok, tail = run_own_tests(args.python, args.timeout)
        print(f"tokenwire's eval-protocol and OpenAI SDK tests: {'OK' if ok else 'FAILED'}\n  {tail}")
        failed |= not ok
    return 1 if failed else 2 if unavailable else 0


if __name__ == "__main__":
    sys.exit(main())
