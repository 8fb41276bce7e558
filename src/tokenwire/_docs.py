"""The documentation of the functions whose implementation is chosen at import.

``parse_generate_response`` and its peers are the compiled core's or the pure-Python
reference's, whichever is in use. Their documentation is written once, in the package's
stub (``__init__.pyi``), where IDEs read it, and copied from there onto the functions in
use, where ``help()`` reads it.
"""

from __future__ import annotations

import ast
from importlib import resources
from typing import Any


def stub_docstrings() -> dict[str, str]:
    """Each documented function of ``__init__.pyi``, by name (empty if the stub is absent)."""
    try:
        text = resources.files(__package__).joinpath("__init__.pyi").read_text("utf-8")
    except OSError:
        return {}
    return {
        node.name: doc
        for node in ast.parse(text).body
        if isinstance(node, ast.FunctionDef) and (doc := ast.get_docstring(node))
    }


def document(namespace: dict[str, Any], names: list[str]) -> None:
    """Give ``namespace[name]`` its documentation from the stub, for each of ``names``."""
    docs = stub_docstrings()
    for name in names:
        if name in docs:
            namespace[name].__doc__ = docs[name]
