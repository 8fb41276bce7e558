"""Benchmarks: every contender times the same bytes in one run, so ratios are comparable.

Run ``python -m pytest benchmarks --benchmark-json=benchmarks/last.json`` and then
``python benchmarks/report.py benchmarks/last.json`` for the table of ratios."""
