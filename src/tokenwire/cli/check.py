"""``tokenwire check``: audit captured responses and summarize their defects by class (the
audit itself is the library's, ``tokenwire.auditing._check``; this is its command and its text report).
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import replace
from typing import Any, TextIO

from ..base import _json
from ..auditing._capture import InputError, field_path
from ..auditing._check import Options, Tally, _cpus, _position, _size, json_report, run
from ..auditing._formats import CLASSES
from ..base._options import from_args
from ..auditing._records import parse_columns, records_sink

__all__ = ["main", "text_report"]


def _histogram_text(counts: Counter) -> str:
    total = sum(counts.values())
    ranked = counts.most_common()
    parts = [f"{d:+d} on {n:,}/{total:,}" for d, n in ranked[:6]]
    if len(ranked) > 6:
        parts.append(f"{len(ranked) - 6} more differences")
    return ", ".join(parts)


def text_report(tally: Tally, out: TextIO) -> None:
    files = len(tally.sources)
    rate = tally.bytes / tally.seconds / 1e6 if tally.seconds > 0 else 0.0
    out.write(
        f"checked {tally.records:,} records ({_size(tally.bytes)}) in {files} file{'s' * (files != 1)} "
        f"in {tally.seconds:.1f} s ({rate:,.0f} MB/s, {tally.records / max(tally.seconds, 1e-9):,.0f} records/s)\n"
    )
    if tally.formats:
        out.write("formats: " + ", ".join(f"{name} {n:,}" for name, n in tally.formats.most_common()) + "\n")
    if tally.records == 0:
        out.write("no records found\n")
    elif not tally.defective:
        out.write("clean: no defects found\n")
    else:
        share = tally.defective / tally.records
        out.write(f"defective: {tally.defective:,} of {tally.records:,} records ({share:.2%})\n\n")
        width = max(len(CLASSES[c]) for c in tally.classes)
        out.write(f"  {'defect class':<{width}}  {'records':>9}\n")
        for cls, label in CLASSES.items():
            if not tally.classes[cls]:
                continue
            out.write(f"  {label:<{width}}  {tally.classes[cls]:>9,}\n")
            if cls == "length_mismatch":
                for key, counts in sorted(tally.histogram.items()):
                    out.write(f"      {key} count minus token_ids count: {_histogram_text(counts)}\n")
        out.write(f"\nfirst examples (up to {tally.options.examples} per class):\n")
        for cls, label in CLASSES.items():
            for example in tally.examples.get(cls, []):
                where = example["location"] or "(top level)"
                out.write(f"  {_position(example)}  [{label}]  {where}: {example['reason']}\n")
        if tally.field_hint is not None:
            out.write(f"\nhint: {tally.field_hint}\n")
    for error in tally.errors:
        out.write(f"not read to the end: {error}\n")


def main(args: Any) -> int:
    """Run ``tokenwire check`` from parsed arguments; the exit status."""
    options = Options(format=args.format, field=field_path(args.field), parse=from_args(args),
                      examples=args.examples)
    columns = parse_columns(getattr(args, "column", None))
    records_path = getattr(args, "records", None)
    if columns and not records_path:
        raise InputError("--column adds a column to the --records rows: give --records OUT too")
    if records_path:
        options = replace(options, records=True, columns=columns)
    jobs = args.jobs or _cpus()
    with records_sink(records_path, columns) as sink:
        if getattr(args, "ray", None):
            from ..ray import run as ray_run

            try:
                tally = ray_run(args.paths, options, address=args.ray, input_kind=args.input,
                                progress=args.progress, sink=sink, rows_file=records_path)
            except (ImportError, ConnectionError) as exc:  # no ray, or no cluster at that address
                raise InputError(f"--ray {args.ray}: {exc}") from None
        else:
            tally = run(args.paths, options, jobs=jobs, input_kind=args.input, progress=args.progress, sink=sink,
                        rows_file=records_path)
    if args.report == "json":
        sys.stdout.write(_json.dumps(json_report(tally), indent=True).decode() + "\n")
    else:
        text_report(tally, sys.stdout)
    sys.stdout.flush()
    for error in tally.errors:
        print(f"tokenwire check: error: {error}", file=sys.stderr)
    if not tally.errors and tally.records == 0:
        print("tokenwire check: warning: no records found", file=sys.stderr)
    return tally.status
