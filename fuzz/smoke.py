"""Run every fuzz target for a bounded time on the seeds; non-zero exit on any finding.

    python fuzz/smoke.py [--seconds 60]      (the long run for a release: --seconds 3600)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
TARGETS = ["fuzz_generate.py", "fuzz_openai.py", "fuzz_base64.py", "fuzz_writer.py", "fuzz_arguments.py",
           "fuzz_mutation.py", "fuzz_collide.py"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--targets", nargs="*", default=TARGETS)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from _common import write_seeds

    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        seeds = Path(tmp) / "seeds"
        write_seeds(seeds)
        for target in args.targets:
            work = Path(tmp) / target.removesuffix(".py")
            work.mkdir()
            for seed in seeds.iterdir():
                (work / seed.name).write_bytes(seed.read_bytes())
            cmd = [sys.executable, str(HERE / target), str(work), f"-max_total_time={args.seconds}",
                   "-rss_limit_mb=4096", "-max_len=65536", f"-artifact_prefix={tmp}/"]
            result = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True)
            tail = [line for line in result.stderr.splitlines() if line.startswith(("#", "Done", "==", "INFO: Running"))]
            print(f"{target}: exit {result.returncode}; {tail[-1] if tail else ''}")
            if result.returncode != 0:
                failed.append(target)
                print(result.stderr[-4000:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
