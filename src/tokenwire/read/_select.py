"""The one choice of implementation, made once per process: the compiled core
(``_core``), or its pure-Python peer (``_pycore``) when there is no core (not built, not
loadable, not CPython) or ``TOKENWIRE_NO_EXTENSIONS=1`` asks for it. The two expose the same
names (``_pycore.CONTRACT``).

``impl`` is the module chosen: the facade and the audit take its four parsers from here.
``kernels`` is the same module, under the name code that holds arrays rather than a response
reads its free functions from (``select_heads``, the writers, ``Ragged.to_lists``, the
renderers drop-in); a test may point it at the other implementation without changing the
parsers. The result types sit below the kernels (which build ``Ragged`` rows), so they do not
import this module: it hands them ``kernels`` (``_types.use_kernels``) once chosen.
"""

from __future__ import annotations

import os
import platform
import warnings
from importlib.util import find_spec
from types import ModuleType

from .. import _pycore
from ..base import _types

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
        return _pycore
    try:
        from .. import _core
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
        return _pycore
    return _core


impl: ModuleType = _choose()
implementation: str = "python" if impl is _pycore else "c"
kernels: ModuleType = impl
_types.use_kernels(kernels)

parse_generate_response = impl.parse_generate_response
parse_completions_response = impl.parse_completions_response
parse_chat_completions_response = impl.parse_chat_completions_response
parse_sglang_generate_response = impl.parse_sglang_generate_response
