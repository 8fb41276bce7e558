"""tokenwire command line.

  tokenwire bench             time the plain parse loop on the embedded workload generator
  tokenwire check PATH...     audit captured responses (JSON, JSONL, gzip) by defect class
  tokenwire inspect FILE      one response's fields, sizes, dtypes, shapes and token counts

Exit status: 0 success (check: no defect), 1 defects found, 2 usage error or unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import tokenwire
from tokenwire.base import _json
from tokenwire import samples
from tokenwire.cli.bench import median_seconds as _median_seconds
from tokenwire.rules import generate as python_rules


def _tokens(response: tokenwire.GenerateResponse) -> int:
    return sum(len(c.completion_ids) for c in response.choices)


def bench_samples(quick: bool = False, names: list[str] | None = None) -> list[dict[str, Any]]:
    """Time every chosen workload. Progress goes to stderr (stdout stays a table or JSON)
    when the run is expected to last more than ~2 s, or once it has."""
    budget = 0.2 if quick else 1.0
    rows = []
    chosen = names or list(samples.SAMPLES)
    started = time.perf_counter()
    long_run = 3 * budget * len(chosen) > 2  # three contenders per workload
    for i, name in enumerate(chosen):
        spec = samples.SAMPLES[name]
        if long_run or time.perf_counter() - started > 2:
            print(f"  [{i + 1}/{len(chosen)}] {name} ...", file=sys.stderr, flush=True)
        raw = spec.raw
        k = spec.top_k
        parsed = tokenwire.parse_generate_response(raw, top_k=k)
        t_tw = _median_seconds(lambda: tokenwire.parse_generate_response(raw, top_k=k), budget)
        t_ref = _median_seconds(lambda: python_rules.parse_generate_response(raw, top_k=k), budget)
        t_orjson = _median_seconds(lambda: _json.loads(raw), budget)
        tokens = _tokens(parsed)
        rows.append(
            {
                "workload": name,
                "description": spec.description,
                "bytes": len(raw),
                "tokens": tokens,
                "top_k": k,
                "tokenwire_s": t_tw,
                "reference_s": t_ref,
                "orjson_loads_s": t_orjson,
                "speedup_vs_reference": t_ref / t_tw,
                "ratio_to_orjson_loads": t_tw / t_orjson,
                "tokens_per_s": tokens / t_tw,
            }
        )
    return rows


def _print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"tokenwire {tokenwire.__version__}: implementation={tokenwire.implementation}, "
        f"simd={tokenwire.simd_path()}"
    )
    header = (
        f"{'workload':<18} {'size':>9} {'tokens':>7} {'tokenwire':>10} {'reference':>10} "
        f"{_json.backend + '.loads':>12} {'vs ref':>8} {'/' + _json.backend:>8} {'tokens/s':>10}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['workload']:<18} {r['bytes'] / 2**20:>7.2f}MB {r['tokens']:>7} "
            f"{r['tokenwire_s'] * 1e3:>8.2f}ms {r['reference_s'] * 1e3:>8.2f}ms "
            f"{r['orjson_loads_s'] * 1e3:>10.2f}ms {r['speedup_vs_reference']:>7.1f}x "
            f"{r['ratio_to_orjson_loads']:>7.2f}x {r['tokens_per_s'] / 1e6:>8.1f}M"
        )
    print(
        "vs ref: speedup over the pure-Python reference; "
        f"/{_json.backend}: time relative to {_json.backend}.loads(raw)"
    )


def _bench_command(args: argparse.Namespace) -> int:
    from tokenwire.cli import bench

    if args.samples:
        if args.workload:
            print("tokenwire bench: error: --workload names plain-loop workloads; --samples times every sample",
                  file=sys.stderr)
            return 2
        rows = bench_samples(quick=args.quick)
    else:
        rows = bench.plain_loop(
            args.workload,
            rounds=3 if args.quick else 5,
            repeats=1 if args.quick else 3,
            warm_budget=0.1 if args.quick else 0.5,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    if args.json:
        print(json.dumps({"implementation": tokenwire.implementation, "simd": tokenwire.simd_path(),
                          "loop": "samples" if args.samples else "plain", "results": rows}, indent=2))
    elif args.samples:
        _print_table(rows)
    else:
        bench.print_table(rows)
    return 0


def _int_argument(minimum: int, expected: str, bound: str, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an int of at least ``minimum`` (and at most ``maximum``); the
    messages name what is expected."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"expected {bound}, got {text if len(text) <= 24 else text[:21] + '...'}")
        return value

    return parse


_positive = _int_argument(1, "a positive integer", "a positive integer")
# More workers than cores (or than chunks of input) are never started; beyond this a value is a typo.
_MAX_JOBS = 1024
_jobs = _int_argument(0, "a number of processes", f"0 (every core) to {_MAX_JOBS}", _MAX_JOBS)
_count = _int_argument(0, "a count", "0 or more")
_experts = _int_argument(1, "a number of experts", "1 to 2**31 experts", 2**31)  # the parsers' num_experts
_dimension = _int_argument(1, "a dimension", "1 to 2**31 - 1", 2**31 - 1)


def _shape(text: str) -> tuple[int, int]:
    """``LAYERS,TOPK`` (or ``LAYERSxTOPK``): the parsers' routed_experts_shape."""
    parts = text.replace("x", ",").split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected LAYERS,TOPK (two positive integers), got {text[:24]!r}")
    layers, topk = (_dimension(part.strip()) for part in parts)
    return layers, topk


# The readers of the parsers' options' values, by the name an option gives (Option.reader).
READERS: dict[str, Callable[[str], Any]] = {"positive": _positive, "experts": _experts, "shape": _shape}


def _parser() -> argparse.ArgumentParser:
    from tokenwire.base._options import audited
    from tokenwire.read._registry import FORMATS

    parser = argparse.ArgumentParser(
        prog="tokenwire", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"tokenwire {tokenwire.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{bench,check,inspect}")

    from tokenwire.cli import bench

    p_bench = sub.add_parser(
        "bench",
        help="time the plain parse loop on the embedded workload generator",
        description=bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p_bench.add_argument("--quick", action="store_true", help="fewer rounds and one process per contender (for CI)")
    p_bench.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p_bench.add_argument("--workload", action="append", choices=sorted(samples.WORKLOADS),
                         help="only this workload (repeatable)")
    p_bench.add_argument("--samples", action="store_true",
                         help="instead: the warm loop over the embedded samples, against the pure-Python reference too")

    formats = ["auto", *FORMATS]
    p_check = sub.add_parser(
        "check",
        help="audit captured responses and summarize defects by class",
        description="Validate every response in JSON, JSONL, gzip or zstd files (told apart by content, "
        "not by name), stream them in constant memory and summarize the defects by class. "
        "Exit status: 0 clean, 1 defects found, 2 usage error or unreadable input.",
    )
    p_check.add_argument("paths", nargs="+", metavar="PATH",
                         help="files (plain, gzip or zstd), directories (searched for *.json, *.jsonl, "
                         "*.ndjson, optionally .gz or .zst), or - for standard input")
    p_check.add_argument("--format", choices=formats, default="auto",
                         help="response format; auto detects it per record (default: auto)")
    p_check.add_argument("--field", metavar="PATH",
                         help="the response is under this dotted key of each record (e.g. response.body; "
                         "list elements by index)")
    for option in audited():  # the parsers' options: tokenwire.base._options
        p_check.add_argument(option.flag, type=READERS[option.reader], metavar=option.metavar, help=option.help)
    p_check.add_argument("--jobs", "-j", type=_jobs, default=1, metavar="N",
                         help=f"worker processes (default 1; 0: one per core; N <= {_MAX_JOBS}); never "
                         "more than the cores, nor than the 4 MB blocks of uncompressed input")
    p_check.add_argument("--input", choices=["auto", "json", "jsonl"], default="auto",
                         help="json: each file is one document (or an array of responses); jsonl: one "
                         "record per line; auto: JSON lines unless the file starts a pretty-printed "
                         "document or an array (default: auto)")
    p_check.add_argument("--report", choices=["text", "json"], default="text", help="summary format (default: text)")
    p_check.add_argument("--examples", type=_count, default=3, metavar="N",
                         help="examples shown per defect class (default 3)")
    p_check.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                         help="progress on stderr (default: only when stderr is a terminal)")
    p_check.add_argument("--records", metavar="OUT",
                         help="also write one row per record (position, verdict, counts) to OUT: "
                         ".parquet (needs pyarrow) or .jsonl")
    p_check.add_argument("--column", action="append", metavar="[NAME=]PATH",
                         help="with --records: one more column, the value at this dotted path of each "
                         "record (e.g. meta.step; repeatable)")
    p_check.add_argument("--ray", metavar="ADDRESS",
                         help="check on a Ray cluster: local (start one here), auto (join the running "
                         "one) or a cluster address; needs ray (pip install 'tokenwire[ray]')")

    p_inspect = sub.add_parser(
        "inspect",
        help="show one response's fields, sizes, dtypes, shapes and token counts",
        description="Show the first record of a JSON, JSONL, gzip or zstd file (or the one on --line): "
        "every field's wire form and size, what tokenwire decodes it to, and the first defect. "
        "Exit status: 0 valid, 1 defective, 2 usage error or unreadable input.",
    )
    p_inspect.add_argument("file", metavar="FILE", help="a file (plain, gzip or zstd), or - for standard input")
    p_inspect.add_argument("--line", type=_positive, metavar="N",
                           help="the record on line N of a JSONL file (element N of a JSON array)")
    p_inspect.add_argument("--field", metavar="PATH", help="the response is under this dotted key of the record")
    p_inspect.add_argument("--format", choices=formats, default="auto", help="response format (default: auto)")
    for option in audited():
        p_inspect.add_argument(option.flag, type=READERS[option.reader], metavar=option.metavar,
                               help=option.inspect_help)
    p_inspect.add_argument("--input", choices=["auto", "json", "jsonl"], default="auto",
                           help="how the file holds records (as for check)")
    p_inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "bench":
        return _bench_command(args)
    from tokenwire.auditing._capture import InputError
    from tokenwire.cli import check, inspect

    try:
        if args.command == "check":
            return check.main(args)
        return inspect.main(args)
    except InputError as exc:
        print(f"tokenwire {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"tokenwire {args.command}: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print(f"tokenwire {args.command}: error: out of memory", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of stdout went away (| head)
        sys.stderr.close()
        return 1

