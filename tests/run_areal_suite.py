#!/usr/bin/env python3
"""AReaL's own tests, without and with tokenwire's drop-in patched in, and AReaL's real request
and parse code against a local server (tests/areal_live.py).

AReaL 1.0.4 runs in a venv of its own (``--python``, default ``$TOKENWIRE_AREAL_PYTHON``)
holding ``areal==1.0.4`` (installed ``--no-deps`` over a CPU torch, see
docs/migrating-from-areal.md), the modules its engine and tests import, and tokenwire. Its
tests come from its public repository at tag ``v1.0.4`` (``--source``: a checkout or an
extracted ``git archive v1.0.4 areal tests``): their conftest points the ``areal`` package at
the checkout's ``areal/``. Each suite file below runs twice from that directory, once as it is
and once with ``-p tokenwire.compat.areal_plugin`` (both with ``-p areal``, which imports the
package whole first: the conftest's namespace stubs otherwise meet a circular import under
Python 3.11); the runs must agree, and the plugin lists the tests that reached a replacement.

    python tests/run_areal_suite.py --python /path/to/venv/bin/python --source /path/to/AReaL

Exit status: 0 both runs agree and the live test passes, 1 they do not, 2 the suite cannot run.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite_junit import run_live_suite  # noqa: E402

VERSION = "1.0.4"
PRELOAD = ["areal"]
# AReaL's tests of the code the drop-in replaces: the inference service's bridge, which drives
# the vLLM and SGLang backends' parse_generation_response through agenerate. The other files
# naming the backends (test_inference_engines.py, test_rollout_controller.py) launch GPU
# inference servers and do not collect on CPU.
SUITE = ("tests/experimental/inference_service/test_inf_bridge.py",)
LIVE = Path(__file__).resolve().parent / "areal_live.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=os.environ.get("TOKENWIRE_AREAL_PYTHON"),
                        help="the interpreter of a venv holding areal==1.0.4 and tokenwire")
    parser.add_argument("--source", default=os.environ.get("TOKENWIRE_AREAL_SOURCE"),
                        help="AReaL's repository at tag v1.0.4 (areal/ and tests/)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    if not args.python or not args.source or not (Path(args.source) / "tests").is_dir():
        print("AReaL suite unavailable: need --python (a venv with areal 1.0.4 and tokenwire) and "
              "--source (AReaL at v1.0.4)", file=sys.stderr)
        return 2
    return run_live_suite("AReaL", VERSION, args.python, lambda work: Path(args.source), SUITE, LIVE,
                          "live backends against 127.0.0.1 (tests/areal_live.py)", drop_in="areal",
                          verbose=args.verbose, preload=PRELOAD)

if __name__ == "__main__":
    sys.exit(main())
