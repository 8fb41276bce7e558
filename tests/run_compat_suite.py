#!/usr/bin/env python3
"""A framework's own tests without and with its tokenwire drop-in patched in, and tokenwire's
test of the drop-in against the framework's real client, in the interpreter that has the
framework installed.

    python tests/run_compat_suite.py verifiers --python /work/venvs/verifiers/bin/python
    python tests/run_compat_suite.py verifiers --python ... --sdist verifiers-0.4.0.tar.gz
    python tests/run_compat_suite.py trl --python /work/venvs/trl/bin/python

For verifiers (0.4.0) it takes the release's sdist (``pip download``, or ``--sdist``: the
archive, its extracted directory, or a directory holding ``verifiers-0.4.0.tar.gz``), runs its
``tests/`` twice with ``python -m pytest -q -p no:cacheprovider --rootdir <sdist>``, without and
with ``-p tokenwire.compat.verifiers_plugin``, and compares the JUnit results as
``run_renderers_suite.py`` does (the same passes and skips, the patch in place for the whole
run). ``tests/v1/test_color_codeword_tasks.py`` is left out: it imports an environment package
of verifiers' repository that the sdist does not ship. TRL 1.16.0 ships no tests in its sdist
(and its repository's tests of that release are not at hand here), so for TRL only tokenwire's
test runs.

Then, for both, ``tests/test_compat_<framework>.py`` of this repository runs in the same
interpreter (it drives the framework's real client against a server on 127.0.0.1). The
interpreter must import tokenwire (``pip install -e .`` into it, or ``PYTHONPATH=src`` with the
core built in place). Exit status: 0 all green, 1 a run failed or differs, 2 a suite could not
be run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run_renderers_suite import Comparison, compare  # noqa: E402
from suite_junit import Run, SuiteUnavailable, environment, run_pytest  # noqa: E402

FRAMEWORKS = {
    # name: (release, the drop-in's plugin, its patched-for-the-whole-session mark, own tests, ignored)
    "verifiers": ("0.4.0", "tokenwire.compat.verifiers_plugin",
                  "tokenwire: verifiers.v1.clients.train stayed patched for the whole session",
                  "tests", ["tests/v1/test_color_codeword_tasks.py"]),
    "trl": ("1.16.0", "tokenwire.compat.trl_plugin",
            "tokenwire: trl.generation.vllm_client stayed patched for the whole session", None, []),
}


def _environment(extra_path: list[str]) -> dict[str, str]:
    return environment(extra_path, [f"TOKENWIRE_{name.upper()}_PATCH" for name in FRAMEWORKS])


def _pytest(python: str, root: Path, junit: Path, targets: list[str], extra: list[str],
            env: dict[str, str], timeout: float) -> Run:
    return run_pytest(python, root, junit, targets, env=env, timeout=timeout,
                      options=[f"--basetemp={junit.with_suffix('.tmp')}", *extra])


def sdist(name: str, release: str, given: str | None, work: Path, python: str) -> Path:
    """The extracted sdist of ``name`` ``release``: ``given`` or a fresh ``pip download``."""
    import tarfile

    path = Path(given) if given else None
    if path is not None and path.is_dir() and (path / "PKG-INFO").is_file():
        return path
    if path is not None and path.is_dir():
        path = next(iter(sorted(path.glob(f"{name}-{release}.tar.gz"))), None)
    if path is None:
        download = work / "download"
        done = subprocess.run([python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                               "--no-build-isolation", "-q", f"{name}=={release}", "-d", str(download)],
                              capture_output=True, text=True, timeout=600)
        found = sorted(download.glob(f"{name}-{release}.tar.gz"))
        if not found:
            raise SuiteUnavailable(f"pip download {name}=={release} failed: {done.stderr.strip()[-500:]}")
        path = found[0]
    with tarfile.open(path) as tar:
        tar.extractall(work / "src", filter="data")
    return work / "src" / f"{name}-{release}"


def own_suite(name: str, python: str, given: str | None, work: Path, timeout: float) -> Comparison:
    release, plugin, mark, tests, ignored = FRAMEWORKS[name]
    root = sdist(name, release, given, work, python)
    env = _environment([])
    extra = [f"--ignore={path}" for path in ignored]
    unpatched = _pytest(python, root, work / "unpatched.xml", [tests], extra, env, timeout)
    patched = _pytest(python, root, work / "patched.xml", [tests], ["-p", plugin, *extra], env, timeout)
    return compare(unpatched, patched, release, mark=mark, framework=name)


def dropin_tests(name: str, python: str, work: Path, timeout: float) -> Run:
    repo = HERE.parent
    env = _environment([str(repo)])
    return _pytest(python, repo, work / "dropin.xml", [f"tests/test_compat_{name}.py"], [], env, timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("framework", choices=sorted(FRAMEWORKS))
    parser.add_argument("--python", default=sys.executable, help="the interpreter that has the framework")
    parser.add_argument("--sdist", help="the framework's sdist (archive, extracted directory, or a directory "
                                        "of archives); default: pip download")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for each pytest run")
    args = parser.parse_args(argv)
    status = 0
    with tempfile.TemporaryDirectory(prefix=f"tokenwire-{args.framework}-") as tmp:
        work = Path(tmp)
        if FRAMEWORKS[args.framework][3] is not None:
            try:
                result = own_suite(args.framework, args.python, args.sdist, work, args.timeout)
            except SuiteUnavailable as exc:
                print(f"{args.framework}: own suite unavailable: {exc}", file=sys.stderr)
                status = 2
            else:
                print(f"{args.framework} {result.version} own tests (the sdist's tests/)")
                print("\n".join(result.report().splitlines()[1:]))
                for test, outcome in sorted(result.unpatched.outcomes.items()):
                    if outcome in ("failed", "error"):
                        print(f"  failed unpatched too: {test} ({result.patched.outcomes.get(test)} patched)")
                status = max(status, 0 if result.ok else 1)
        try:
            run = dropin_tests(args.framework, args.python, work, args.timeout)
        except SuiteUnavailable as exc:
            print(f"{args.framework}: tests/test_compat_{args.framework}.py unavailable: {exc}", file=sys.stderr)
            return 2
        print(f"tests/test_compat_{args.framework}.py in {args.python}: {run.summary()}")
        if run.count("failed") or run.count("error") or not run.count("passed"):
            print(run.output[-3000:])
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
