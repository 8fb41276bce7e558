#!/usr/bin/env python3
"""renderers' own client tests, without and with tokenwire's replacements patched in, for
each renderers release the drop-in follows.

For every release (default: each of ``tokenwire.compat.renderers.SUPPORTED_VERSIONS``), runs
``tests/test_client.py`` of that release's sdist twice with
``python -m pytest -q -p no:cacheprovider --rootdir <sdist>``, with the sdist's own
``renderers`` package first on the path (whatever renderers the interpreter has installed):
once as it is, once with ``-p tokenwire.compat.renderers_plugin``. A release succeeds when every
test that passes without the patch passes with it, the same tests are skipped for the same
reasons, the patch was in place for the whole patched run, and the drop-in followed that
release.

    python tests/run_renderers_suite.py                          # every release, pip-downloaded
    python tests/run_renderers_suite.py --version 0.1.13.dev17   # one release (repeatable)
    python tests/run_renderers_suite.py --sdist renderers-0.1.13.dev13.tar.gz
    python tests/run_renderers_suite.py --sdist /path/to/renderers-0.1.13.dev13  # extracted
    python tests/run_renderers_suite.py --sdist /path/to/downloads  # renderers-V.tar.gz inside

``--sdist`` (one archive, its extracted directory, or a directory holding ``renderers-V.tar.gz``
archives as ``pip download -d`` leaves them; a release missing there is downloaded) may also
come from ``TOKENWIRE_RENDERERS_SDIST``. Exit status: 0 every patched run matches, 1 one does
not, 2 a suite could not be run (no sdist, renderers not importable).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

try:
    from . import suite_junit as _junit
except ImportError:  # run as a script: tests/ is on the path
    import suite_junit as _junit  # type: ignore[no-redef]

Run, SuiteUnavailable, parse_junit = _junit.Run, _junit.SuiteUnavailable, _junit.parse_junit

SUITE = "tests/test_client.py"
CLIENT = "renderers/client.py"
PLUGIN = "tokenwire.compat.renderers_plugin"
# What the plugin prints when the patch was in place from collection to the end (followed by
# the release the drop-in followed).
PATCHED_MARK = "tokenwire: renderers.client stayed patched for the whole session"


def versions() -> tuple[str, ...]:
    """The releases the drop-in follows, oldest first."""
    from tokenwire.compat.renderers import SUPPORTED_VERSIONS

    return SUPPORTED_VERSIONS


@dataclass
class Comparison(_junit.Comparison):
    client: str = ""  # sha256 of the release's renderers/client.py (first 12 digits)

    def title(self) -> str:
        return f"renderers {self.version} {SUITE} (client.py sha256 {self.client or '?'})"


def download(dest: Path, version: str, python: str = sys.executable, timeout: float = 120) -> Path:
    """The sdist of renderers ``version``, fetched with pip into ``dest`` (tried twice)."""
    command = [python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", "-q", f"renderers=={version}", "-d", str(dest)]
    detail = ""
    for _ in range(2):
        try:
            subprocess.run(command, check=True, capture_output=True, text=True, timeout=timeout)
            break
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            detail = str(getattr(exc, "stderr", "") or exc)
    else:
        raise SuiteUnavailable(f"pip download renderers=={version} failed: {detail.strip()[-500:]}")
    found = sorted(dest.glob(f"renderers-{version}.tar.gz"))
    if not found:
        raise SuiteUnavailable(f"pip download left no renderers-{version}.tar.gz in {dest}")
    return found[0]


def extract(archive: Path, dest: Path) -> Path:
    """Unpack the sdist (no member may leave ``dest``) and return its top directory."""
    dest.mkdir(parents=True, exist_ok=True)
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


def sdist_version(root: Path) -> str:
    """The release an extracted sdist holds (its PKG-INFO)."""
    try:
        for line in (root / "PKG-INFO").read_text(encoding="utf-8").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    raise SuiteUnavailable(f"{root}: no PKG-INFO with a Version")


def sdist_root(sdist: str | None, workdir: Path, version: str | None = None,
               python: str = sys.executable) -> Path:
    """The extracted sdist of ``version``: from ``sdist`` (an archive, its extracted directory,
    or a directory holding ``renderers-<version>.tar.gz``) when it holds that release, else a
    fresh download. Without a ``version``, ``sdist`` itself, whichever release it holds."""
    work = workdir / (version or "given")
    path = Path(sdist) if sdist else None
    if path is not None and path.is_dir() and not (path / SUITE).is_file():
        archives = sorted(path.glob(f"renderers-{version}.tar.gz")) if version else []
        path = archives[0] if archives else None
    if path is not None and path.is_dir():
        if version is None or sdist_version(path) == version:
            return path
    elif path is not None and path.is_file():
        if version is None or path.name == f"renderers-{version}.tar.gz":
            return extract(path, work / "src")
    elif sdist and version is None:
        raise SuiteUnavailable(f"no such sdist: {sdist}")
    if version is None:
        raise SuiteUnavailable("which renderers release? (an --sdist or a --version)")
    return extract(download(work / "download", version, python), work / "src")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def run_pytest(root: Path, junit: Path, *, patched: bool, python: str = sys.executable,
               extra: list[str] | None = None, timeout: float = 600) -> Run:
    return _junit.run_pytest(python, root, junit, [SUITE, *(extra or [])], env=environment(root),
                             plugin=PLUGIN if patched else None, timeout=timeout)


def environment(root: Path) -> dict[str, str]:
    """The sdist's renderers package first on the path, and both runs exactly as written here."""
    return _junit.environment([str(root)], ["TOKENWIRE_RENDERERS_PATCH"])


def compare(unpatched: Run, patched: Run, version: str | None = None, *, mark: str = PATCHED_MARK,
            framework: str = "renderers") -> Comparison:
    """The problems of a patched run against the unpatched one (``mark``: what the plugin
    prints when the patch stayed in place, followed by ``(<framework> <version>)``)."""
    result = Comparison(unpatched, patched, version or "?", problems=_junit.differences(unpatched, patched))
    problems = result.problems
    if mark not in patched.output:
        problems.append("the patched run does not report the patch in place for the whole session")
    if version is not None:
        followed = re.search(re.escape(mark) + rf" \({re.escape(framework)} (\S+)\)", patched.output)
        if followed is None or followed.group(1) != version:
            problems.append(f"the drop-in did not follow {framework} {version} "
                            f"(it followed {followed.group(1) if followed else 'nothing it reported'})")
    return result


def run_suite(sdist: str | None = None, *, version: str | None = None, python: str = sys.executable,
              extra: list[str] | None = None, workdir: Path | None = None) -> Comparison:
    """Both runs of one release's suite and their comparison: ``version``'s sdist (from
    ``sdist`` or downloaded), or the single sdist ``sdist``. Raises
    :class:`SuiteUnavailable` when the suite cannot run here."""
    with tempfile.TemporaryDirectory(prefix="tokenwire-renderers-") as tmp:
        work = Path(workdir or tmp)
        root = sdist_root(sdist, work, version, python)
        release = sdist_version(root)
        if version is not None and release != version:
            raise SuiteUnavailable(f"{root} holds renderers {release}, not {version}")
        probe = subprocess.run(
            [python, "-c", "import renderers, renderers.client, tokenwire.compat.renderers; "
                           "print(renderers.__version__); print(renderers.__file__)"],
            cwd=root, env=environment(root), capture_output=True, text=True,
        )
        if probe.returncode:
            raise SuiteUnavailable(f"renderers or tokenwire is not importable by {python}: "
                                   f"{probe.stderr.strip()[-500:]}")
        imported, location = (probe.stdout.splitlines() + ["", ""])[:2]
        if imported != release or root.resolve() not in Path(location).resolve().parents:
            raise SuiteUnavailable(f"the sdist's renderers {release} is not the one imported "
                                   f"({imported} from {location})")
        tag = release.replace("/", "_")
        unpatched = run_pytest(root, work / f"{tag}-unpatched.xml", patched=False, python=python, extra=extra)
        patched = run_pytest(root, work / f"{tag}-patched.xml", patched=True, python=python, extra=extra)
        result = compare(unpatched, patched, release)
        result.client = digest(root / CLIENT)
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", default=os.environ.get("TOKENWIRE_RENDERERS_SDIST"),
                        help="renderers sdist (.tar.gz), its extracted directory, or a directory of "
                             "renderers-V.tar.gz archives; default: pip download")
    parser.add_argument("--version", action="append", dest="versions", metavar="VERSION",
                        help="a renderers release to run (repeatable); default: every supported one")
    parser.add_argument("--python", default=sys.executable, help="interpreter to run pytest with")
    parser.add_argument("--verbose", action="store_true", help="print both runs' output")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    if args.sdist and not Path(args.sdist).exists():
        print(f"renderers suite unavailable: no such sdist: {args.sdist}", file=sys.stderr)
        return 2
    single = args.sdist and Path(args.sdist).exists() and not args.versions and (
        Path(args.sdist).is_file() or (Path(args.sdist) / SUITE).is_file())
    wanted: list[str | None] = [None] if single else list(args.versions or versions())
    failed = unavailable = False
    with tempfile.TemporaryDirectory(prefix="tokenwire-renderers-") as tmp:
        for version in wanted:
            try:
                result = run_suite(args.sdist, version=version, python=args.python,
                                   extra=args.pytest_args, workdir=Path(tmp))
            except SuiteUnavailable as exc:
                print(f"renderers {version or args.sdist}: suite unavailable: {exc}", file=sys.stderr)
                unavailable = True
                continue
            failed |= not _junit.show(result, args.verbose)
    return 1 if failed else 2 if unavailable else 0


if __name__ == "__main__":
    sys.exit(main())
