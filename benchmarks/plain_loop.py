"""The loop a trainer writes: a fresh process per contender, distinct responses, parse, use,
drop, next (``tokenwire bench`` prints the same table; see ``tokenwire.cli.bench``).

    python benchmarks/plain_loop.py                      # every workload
    python benchmarks/plain_loop.py --json rows.json     # also the rows as JSON
    python benchmarks/plain_loop.py -w moe_16k -r 8      # one workload, eight rounds
"""

from __future__ import annotations

import argparse
import json
import sys

from tokenwire import samples
from tokenwire.cli import bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-w", "--workload", action="append", choices=sorted(samples.WORKLOADS))
    parser.add_argument("-n", "--responses", type=int, default=8, help="distinct responses per workload")
    parser.add_argument("-r", "--rounds", type=int, default=6, help="passes over the responses per process")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per contender")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    rows = bench.plain_loop(args.workload, responses=args.responses, rounds=max(args.rounds, 2),
                             repeats=args.repeats, progress=lambda line: print(line, file=sys.stderr))
    bench.print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
