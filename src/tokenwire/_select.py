"""The one choice of implementation, made once per process: the compiled core, or the
pure-Python reference when there is no core (not built, not loadable, not CPython) or
``TOKENWIRE_NO_EXTENSIONS=1`` asks for it.

``impl`` is the module whose parsers the facade exports; ``kernels`` is the module whose free
functions (``int_list``, ``first_bad``, ``first_bad_support``, ``compact_rows``,
``compact_candidates``, ``compact_rows_candidates``, ``heads``, ``rows_to_lists``, ``b64decode``, ``b64encode``) run the
per-token loops for code that holds arrays rather than a response: ``select_heads``, the
writers, ``Ragged.to_lists`` and the renderers drop-in. With the compiled core both are
``_core``; in pure Python they are ``rules.generate`` and ``kernels.python``.

The four response parsers in use are chosen here too, for the facade and the audit alike:
the core's, or in pure Python ``rules.generate``'s and ``rules.openai``'s. The result types
sit below the kernels (which build ``Ragged`` rows), so they do not import this module: it
hands them ``kernels`` (``_types.use_kernels``) once chosen.
"""

from __future__ import annotations

import os
import platform
import warnings
from importlib.util import find_spec
from types import ModuleType

from . import _types
from .kernels import python as _python_kernels
from .rules import generate as _python_rules

__all__ = [
    "impl",
    "implementation",
    "kernels",
    "parse_chat_completions_response",
    "parse_completions_response",
    "parse_generate_response",
    "parse_sglang_generate_response",
]


def _wanted(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def _choose() -> ModuleType:
    if _wanted("TOKENWIRE_NO_EXTENSIONS") or platform.python_implementation() != "CPython":
        return _python_rules
    try:
        from . import _core
    except ImportError as exc:
        if _wanted("TOKENWIRE_REQUIRE_EXTENSIONS"):
            raise
        if find_spec(f"{__package__}._core") is None:
            # Python would say "cannot import name '_core' ... circular import": not the cause.
            problem = (
                "tokenwire's compiled core is not built/installed (this copy was installed "
                "without it, most likely from source on a machine without a working C compiler)"
            )
        else:
            problem = f"tokenwire's compiled core is installed but failed to load ({exc})"
        warnings.warn(
            f"{problem}; using the pure-Python reference implementation, which is correct but "
            "far slower. For the fast build, install a C compiler and reinstall from source "
            "(pip install --force-reinstall --no-cache-dir --no-binary tokenwire tokenwire), "
            "or install a prebuilt wheel for this platform. TOKENWIRE_NO_EXTENSIONS=1 "
            "selects the reference without this warning.",
            RuntimeWarning,
            stacklevel=3,
        )
        return _python_rules
    return _core


impl: ModuleType = _choose()
implementation: str = "c" if impl is not _python_rules else "python"
kernels: ModuleType = impl if implementation == "c" else _python_kernels
_types.use_kernels(kernels)

parse_generate_response = impl.parse_generate_response
if implementation == "c":
    parse_completions_response = impl.parse_completions_response
    parse_chat_completions_response = impl.parse_chat_completions_response
    parse_sglang_generate_response = impl.parse_sglang_generate_response
else:
    from .rules.openai import (
        parse_chat_completions_response,
        parse_completions_response,
        parse_sglang_generate_response,
    )
