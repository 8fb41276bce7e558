#!/usr/bin/env python3
"""NeMo-Gym's own tests, without and with tokenwire's drop-in patched in, and NeMo-Gym's real
client against a local server (tests/nemo_gym_live.py).

NeMo-Gym 0.7.0 needs Python 3.13 and its own dependencies, so this runs in a venv of its own
(``--python``, default ``$TOKENWIRE_NEMO_GYM_PYTHON``) where ``pip install nemo-gym==0.7.0`` and
tokenwire are installed. Its tests come from its sdist (``--sdist``: the archive or its
extracted directory; default: ``pip download`` of the release). Each suite file below runs
twice with ``python -m pytest -p no:cacheprovider --rootdir <sdist>`` from the sdist's
directory, once as it is and once with ``-p tokenwire.compat.nemo_gym_plugin``; the runs must
agree (every test that passes unpatched passes patched, the same skips), and the plugin lists
the tests that reached a replacement.

    python tests/run_nemo_gym_suite.py --python /path/to/venv/bin/python [--sdist nemo_gym-0.7.0.tar.gz]

Exit status: 0 both runs agree and the live test passes, 1 they do not, 2 the suite cannot run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite_junit import run_live_suite  # noqa: E402

VERSION = "0.7.0"
# NeMo-Gym's tests of the code the drop-in replaces or feeds: the vLLM model server (which
# reads the token ids, logprobs and routing), the HTTP helpers and OpenAI client
# (get_response_json), and the routing envelope's codec.
SUITE = (
    "responses_api_models/vllm_model/tests",
    "tests/unit_tests/test_server_utils.py",
    "tests/unit_tests/test_openai_utils.py",
    "tests/unit_tests/test_token_capture_staging_routes.py",
)
LIVE = Path(__file__).resolve().parent / "nemo_gym_live.py"


def sdist_root(sdist: str | None, work: Path, python: str) -> Path:
    if sdist and Path(sdist).is_dir():
        return Path(sdist)
    archive = Path(sdist) if sdist else None
    if archive is None:
        dest = work / "download"
        subprocess.run([python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        "--ignore-requires-python", "-q", f"nemo-gym=={VERSION}", "-d", str(dest)],
                       check=True, capture_output=True, timeout=600)
        archive = next(dest.glob(f"nemo_gym-{VERSION}.tar.gz"))
    import tarfile

    with tarfile.open(archive) as tar:
        tar.extractall(work / "src", filter="data")
    return next(p for p in (work / "src").iterdir() if (p / "nemo_gym").is_dir())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=os.environ.get("TOKENWIRE_NEMO_GYM_PYTHON"),
                        help="the interpreter of a venv holding nemo-gym==0.7.0 and tokenwire")
    parser.add_argument("--sdist", default=os.environ.get("TOKENWIRE_NEMO_GYM_SDIST"))
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    if not args.python:
        print("NeMo-Gym suite unavailable: no --python (a venv with nemo-gym 0.7.0 and tokenwire)",
              file=sys.stderr)
        return 2
    return run_live_suite("NeMo-Gym", VERSION, args.python, lambda work: sdist_root(args.sdist, work, args.python),
                          SUITE, LIVE, "live client against 127.0.0.1 (tests/nemo_gym_live.py)", drop_in="nemo_gym",
                          verbose=args.verbose)

if __name__ == "__main__":
    sys.exit(main())
