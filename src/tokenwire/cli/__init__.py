"""tokenwire command line.

  tokenwire bench             time the plain parse loop on the embedded workload generator
  tokenwire check PATH...     audit captured responses (JSON, JSONL, gzip) by defect class
  tokenwire inspect FILE      one response's fields, sizes, dtypes, shapes and token counts

Exit status: 0 success (check: no defect), 1 defects found, 2 usage error or unreadable input.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Run the command line (the ``tokenwire`` script, ``python -m tokenwire``)."""
    from tokenwire.cli.commands import main as run

    return run(argv)
