"""tokenwire command line: ``main`` runs it. The commands (``bench``, ``check``, ``inspect``)
and their usage are in ``commands.py``, loaded only when the command line runs; they import
the library, never the reverse.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Run the command line (the ``tokenwire`` script, ``python -m tokenwire``)."""
    from tokenwire.cli.commands import main as run

    return run(argv)
