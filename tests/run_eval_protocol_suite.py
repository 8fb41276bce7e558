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

Both runs are made the way eval-protocol's CI makes them, as far as the sdist allows: its
repository's ``pytest.ini`` (``asyncio_mode = auto``), which the sdist does not ship, is given as
``-o`` options (:data:`PYTEST_OPTIONS`); the interpreter's ``bin/`` comes first on ``PATH``, as
under ``uv run`` (its event-bus tests start ``python`` helpers); the optional dependencies its
tests import and CI installs (``uv sync --all-extras``) are checked at the versions of
:data:`EXTRAS` (``--install-extras`` installs them from PyPI). The same tests are left out both
ways, each with its reason (:data:`DESELECTED`, :data:`IGNORED`; none of them reaches the
Fireworks client), and the files of :data:`ISOLATED` run in a pytest process of their own. The
suite is green when neither run has a failure or an error.

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
# Between the outputs of a run's pytest processes: each must report the patch on its own.
PROCESS_BREAK = "\n--- the next pytest process of this run ---\n"
HERE = Path(__file__).resolve().parent
# The repository's pytest.ini (not in the sdist): pytest-asyncio in auto mode, which the
# module-level async tests of test_event_bus.py need.
PYTEST_OPTIONS = ["-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function"]
# Optional dependencies that eval-protocol's tests import, at the versions last run with
# (eval-protocol's extras: langfuse for the package's star import, huggingface for the
# n-variant pipeline tests); langfuse 4 and later moved the modules its adapter imports.
EXTRAS = {"langfuse": "3.15.0", "datasets": "5.2.0"}
# Modules that cannot run from the sdist, left out of both runs (--ignore): the files they import
# are in eval-protocol's repository, not in the sdist.
IGNORED = {
    "tests/test_control_plane_separation.py": "imports frozen_lake_mcp from the repository's examples/",
    "tests/test_e2b_integration.py": "imports tests/conftest.py (not in the sdist); E2B is a hosted sandbox",
    "tests/test_e2b_js_integration.py": "imports tests/conftest.py (not in the sdist); E2B is a hosted sandbox",
    "tests/test_generic_server.py": "imports tests/dummy_module_for_server_test.py (not in the sdist)",
    "tests/test_klavis_evaluation.py": "imports tests/klavis_helpers.py (not in the sdist); Klavis is a hosted service",
    "tests/test_tau_bench_airline_smoke.py": "eval-protocol's CI ignores it (--ignore); it reads "
                                             "tests/pytest/data/airline_dataset.jsonl (not in the sdist) and calls a hosted model",
    "tests/test_examples_end_to_end.py": "copies the repository's examples/ (not in the sdist)",
}
# Single tests left out of both runs (--deselect), each with its reason.
_EXAMPLES = "loads a reward function from the repository's examples/ package (not in the sdist)"
DESELECTED = {
    "tests/test_adapters_e2e.py::TestHuggingFaceAdapterE2E::test_math_dataset_real_data":
        "downloads a data set from the Hugging Face Hub (network)",
    "tests/test_n_variant_integration.py::test_n_variant_generation_single_sample": _EXAMPLES,
    "tests/test_n_variant_integration.py::test_n_variant_generation_disabled": _EXAMPLES,
    "tests/test_n_variant_integration.py::test_n_variant_generation_config_validation": _EXAMPLES,
    "tests/test_n_variant_batch_integration.py::test_end_to_end_n_variant_to_batch_evaluation": _EXAMPLES,
    "tests/test_parallel_rollouts.py::test_mcp_resource_type_compatibility":
        "imports the repository's examples/ package (not in the sdist)",
    "tests/test_event_bus.py::TestSqliteEventBus::test_evaluation_row_events":
        "starts `python test_event_bus_helper.py` relative to the working directory, where its sibling "
        "test starts tests/test_event_bus_helper.py: from the suite's root (eval-protocol's CI runs "
        "from there) the helper is not found and the listener prints nothing",
}
# Files run in a pytest process of their own: they pass alone and together, and fail in a session
# that has collected the rest of tests/, even with no other test run (-k selecting them): their
# in-process pytest.main discovery of a project written to a temporary directory then finds no
# test, or no data set. Which module's import does it was not pinned down.
ISOLATED = ["tests/test_ep_upload_e2e.py", "tests/test_cli_create_rft.py"]


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
        lines.append(f"  left out of both runs: {len(IGNORED)} modules (--ignore), {len(DESELECTED)} tests (--deselect)")
        lines += [f"    {name}: {reason}" for name, reason in (*IGNORED.items(), *DESELECTED.items())]
        lines.append(f"  run in a process of their own, both ways: {', '.join(ISOLATED)}")
        both = sorted(name for name, outcome in self.unpatched.outcomes.items()
                      if outcome in ("failed", "error") and self.patched.outcomes.get(name) == outcome)
        if both:
            lines.append(f"  failing or erring both ways: {len(both)}")
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


def environment(root: Path | None, python: str | None = None) -> dict[str, str]:
    env = _junit.environment([str(root)] if root is not None else [], ["TOKENWIRE_EVAL_PROTOCOL_PATCH"])
    if python is not None:  # its venv's bin/ first, as under `uv run`: the tests start `python`
        env["PATH"] = os.pathsep.join([str(Path(python).parent), env.get("PATH", "")])
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # litellm's import would fetch a price list
    # eval-protocol's client tests build AsyncFireworks() without a key (its CI has one) and
    # then replace its transport with their own object: a stand-in key, which no request carries
    # off this machine (nothing here reaches Fireworks).
    env["FIREWORKS_API_KEY"] = "tokenwire-suite-stand-in"
    return env


def left_out() -> list[str]:
    """The options that leave :data:`IGNORED` and :data:`DESELECTED` out of a run."""
    return [*(f"--ignore={path}" for path in IGNORED), *(f"--deselect={node}" for node in DESELECTED)]


def run_pytest(root: Path, junit: Path, targets: list[str], *, patched: bool, python: str,
               extra: list[str], timeout: float) -> Run:
    """One run (both ways alike): ``targets`` but :data:`ISOLATED` in one process, the files of
    :data:`ISOLATED` among ``targets`` in another, their results put together."""
    isolated = [path for path in ISOLATED if any(path == t or path.startswith(t.rstrip("/") + "/") for t in targets)]
    options = ["--continue-on-collection-errors", *PYTEST_OPTIONS, *left_out()]
    groups = [[*targets, *extra, *(f"--ignore={path}" for path in isolated)]]
    if isolated:
        groups.append([*isolated, *extra])
    runs = [_junit.run_pytest(python, root, junit.with_suffix(f".{i}.xml"), group, env=environment(root, python),
                              plugin=PLUGIN if patched else None, options=options, timeout=timeout)
            for i, group in enumerate(groups)]
    return Run({k: v for run in runs for k, v in run.outcomes.items()},
               {k: v for run in runs for k, v in run.skips.items()},
               PROCESS_BREAK.join(run.output for run in runs), max(run.returncode for run in runs))


def check_extras(python: str, install: bool) -> None:
    """:data:`EXTRAS` installed at their versions (pip-installed first with ``install``)."""
    pins = [f"{name}=={version}" for name, version in EXTRAS.items()]
    if install:
        subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *pins],
                       check=False, timeout=1200)
    probe = subprocess.run(
        [python, "-c", "import importlib.metadata as m, sys\nfor n in sys.argv[1:]:\n"
                       "    try: print(n, m.version(n))\n    except m.PackageNotFoundError: print(n, None)", *EXTRAS],
        capture_output=True, text=True)
    found = dict(line.split(" ", 1) for line in probe.stdout.splitlines())
    wrong = [f"{name} {found.get(name)} (want {version})" for name, version in EXTRAS.items()
             if found.get(name) != version]
    if wrong:
        raise SuiteUnavailable(f"eval-protocol's test extras: {', '.join(wrong)}; "
                               f"pip install {' '.join(pins)} (or pass --install-extras)")


def compare(unpatched: Run, patched: Run, version: str) -> Comparison:
    # The test-by-test comparison, with this plugin's marks.
    result = Comparison(unpatched, patched, version, problems=_junit.differences(unpatched, patched))
    problems = result.problems
    for label, run in (("unpatched", unpatched), ("patched", patched)):
        if run.count("failed") or run.count("error"):
            problems.append(f"the {label} run is not green: {run.summary()}")
    result.calls, result.callers = 0, []
    for number, output in enumerate(patched.output.split(PROCESS_BREAK), 1):
        followed = FOLLOWED.search(output)
        if followed is None:
            problems.append(f"the patched run's pytest process {number} does not report the patch in place "
                            f"for the whole session")
        elif followed.group(1) != version:
            problems.append(f"the drop-in followed eval-protocol {followed.group(1)}, not {version}")
        else:
            result.calls += int(followed.group(2))
        callers = CALLERS.search(output)
        if callers:
            result.callers += [line.strip() for line in callers.group(2).splitlines() if line.strip()]
    return result


def run_suite(sdist: str | None, version: str, *, python: str, only: list[str], extra: list[str],
              workdir: Path, timeout: float, install_extras: bool = False) -> Comparison:
    root = sdist_root(sdist, workdir, version, python)
    check_extras(python, install_extras)
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
    parser.add_argument("--install-extras", action="store_true",
                        help="pip install the test extras (EXTRAS) into --python's environment first")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per pytest run")
    parser.add_argument("--verbose", action="store_true", help="print both runs' output")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    failed = unavailable = False
    with tempfile.TemporaryDirectory(prefix="tokenwire-eval-protocol-") as tmp:
        for version in versions():
            try:
                result = run_suite(args.sdist, version, python=args.python, only=args.only, extra=args.pytest_args,
                                   workdir=Path(tmp), timeout=args.timeout, install_extras=args.install_extras)
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
