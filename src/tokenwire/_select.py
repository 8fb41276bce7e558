"""The one choice of implementation, made once per process: the compiled core, or the
pure-Python reference when there is no core (not built, not loadable, not CPython) or
``TOKENWIRE_NO_EXTENSIONS=1`` asks for it.

``impl`` is the module whose parsers the facade exports; ``kernels`` is the module whose free
functions (``int_list``, ``first_bad``, ``first_bad_support``, ``compact_rows``,
``compact_candidates``, ``heads``, ``rows_to_lists``, ``b64decode``, ``b64encode``) run the
per-token loops for code that holds arrays rather than a response: ``select_heads``, the
writers, ``Ragged.to_lists`` and the renderers drop-in. It is the same module.
"""

from __future__ import annotations

import os
import platform
import warnings
from types import ModuleType

from . import _reference

__all__ = ["implementation", "impl", "kernels"]


def _wanted(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def _choose() -> ModuleType:
    if _wanted("TOKENWIRE_NO_EXTENSIONS") or platform.python_implementation() != "CPython":
        return _reference
    try:
        from . import _core
    except ImportError as exc:
        if _wanted("TOKENWIRE_REQUIRE_EXTENSIONS"):
            raise
        warnings.warn(
            f"tokenwire's compiled core is not available ({exc}); using the pure-Python "
            "reference implementation, which is correct but far slower.",
            RuntimeWarning,
            stacklevel=3,
        )
        return _reference
    return _core


impl: ModuleType = _choose()
kernels: ModuleType = impl
implementation: str = "c" if impl is not _reference else "python"
