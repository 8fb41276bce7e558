"""Print the ratios of one pytest-benchmark run as a Markdown table.

    python -m pytest benchmarks --benchmark-json=benchmarks/last.json
    python benchmarks/report.py benchmarks/last.json
"""

from __future__ import annotations

import json
import platform
import sys
from collections import defaultdict


def contender(name: str) -> str:
    return name.split("[")[0].removeprefix("test_")


def main(path: str) -> None:
    data = json.load(open(path))
    groups: dict[str, dict[str, float]] = defaultdict(dict)
    minima: dict[str, dict[str, float]] = defaultdict(dict)
    sizes: dict[str, int] = {}
    for bench in data["benchmarks"]:
        group = bench["group"] or bench["name"]
        groups[group][bench["name"]] = bench["stats"]["median"]
        minima[group][bench["name"]] = bench["stats"]["min"]
        if "bytes" in bench.get("extra_info", {}):
            sizes[group] = bench["extra_info"]["bytes"]
    info = data.get("machine_info", {})
    print(f"Machine: {info.get('cpu', {}).get('brand_raw', platform.processor())}, "
          f"{info.get('cpu', {}).get('count', '?')} cores, Python {info.get('python_version', '?')}, "
          f"{data.get('datetime', '')}\n")
    generate = {g: t for g, t in groups.items() if not g.startswith(("b64decode", "b64encode", "write", "generate()"))}
    if generate:
        print("| workload | size | tokenwire | reference | renderers | orjson.loads | pybase64 spans | x renderers | x reference | / orjson | / pybase64 |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for group, times in generate.items():
            by = {contender(n): t for n, t in times.items()}
            tw = by.get("tokenwire")
            if tw is None:
                continue

            def ms(key: str) -> str:
                return f"{by[key] * 1e3:.2f} ms" if key in by else "-"

            def ratio(key: str, inverse: bool = False) -> str:
                if key not in by:
                    return "-"
                return f"{(tw / by[key]) if inverse else (by[key] / tw):.2f}x"

            print(f"| {group} | {sizes.get(group, 0) / 2**20:.2f} MB | {ms('tokenwire')} | {ms('reference')} | "
                  f"{ms('renderers')} | {ms('orjson_loads')} | {ms('pybase64_spans')} | {ratio('renderers')} | "
                  f"{ratio('reference')} | {ratio('orjson_loads', True)} | {ratio('pybase64_spans', True)} |")
        print()
    drop_in = {g: t for g, t in groups.items() if g.startswith("generate()")}
    if drop_in:
        print("renderers' `generate()`, unpatched and patched (and, where timed, with parsers that only "
              "make the return values); median / minimum, result freed outside the timed call:\n")
        print("| workload | renderers | patched | speedup | return values only | bound |")
        print("|---|---|---|---|---|---|")
        for group, times in drop_in.items():
            by = {contender(n): (t, minima[group][n]) for n, t in times.items()}
            theirs, ours = by.get("renderers_generate"), by.get("renderers_generate_patched")
            if theirs is None or ours is None:
                continue
            only = by.get("renderers_generate_return_values_only")
            bound = "-" if only is None else f"{only[0] * 1e3:.2f} / {only[1] * 1e3:.2f} ms"
            most = "-" if only is None else f"{theirs[0] / only[0]:.1f}x / {theirs[1] / only[1]:.1f}x"
            print(f"| {group.removeprefix('generate() ')} | {theirs[0] * 1e3:.2f} / {theirs[1] * 1e3:.2f} ms | "
                  f"{ours[0] * 1e3:.2f} / {ours[1] * 1e3:.2f} ms | {theirs[0] / ours[0]:.1f}x / "
                  f"{theirs[1] / ours[1]:.1f}x | {bound} | {most} |")
        print()
    writes = {g: t for g, t in groups.items() if g.startswith("write")}
    for group, times in writes.items():
        by = {contender(n): t for n, t in times.items()}
        if "tokenwire_write" in by and "stdlib_write" in by:
            print(f"{group}: tokenwire {by['tokenwire_write'] * 1e3:.2f} ms, numpy + base64 + json.dumps "
                  f"{by['stdlib_write'] * 1e3:.2f} ms: {by['stdlib_write'] / by['tokenwire_write']:.1f}x\n")
    b64 = {g: t for g, t in groups.items() if g.startswith(("b64decode", "b64encode"))}
    if b64:
        print("| operation, size | path | tokenwire GB/s | pybase64 same path GB/s | ratio | pybase64 default GB/s | ratio |")
        print("|---|---|---|---|---|---|---|")
        for group, times in b64.items():
            size = sizes.get(group, 0)
            theirs = {n.split("[")[1].split("-")[-1].rstrip("]"): t for n, t in times.items() if "pybase64" in n}
            for name, t in sorted(times.items()):
                if "pybase64" in name:
                    continue
                path = name.split("-")[-1].rstrip("]")
                same, default = theirs.get(path), theirs.get("default")

                def cell(other, t=t, size=size):
                    return ("-", "-") if other is None else (f"{size / other / 1e9:.2f}", f"{other / t:.2f}x")

                print(f"| {group} | {path} | {size / t / 1e9:.2f} | {' | '.join(cell(same))} | {' | '.join(cell(default))} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/last.json")
