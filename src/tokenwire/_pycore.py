"""The pure-Python peer of the compiled core: one module with the names ``tokenwire._core``
exposes for the rest of the package, each the reference's own function.

``_select`` chooses between the two (``_select.impl``), and the tests run both through the
same fixture. The functions live where they are written: the per-token kernels in
``kernels/python.py``, the extractors in ``extract/python.py``, the parsers in
``rules/generate.py`` and ``rules/openai.py``; this module only gathers them, so it holds no
code of its own and the names here are the very objects those modules define.

It is named for the module it mirrors and is private as that one is: the facade
(``tokenwire``) is the API, and neither peer is imported by callers directly.

The contract, which ``tests/test_peers.py`` checks in both directions:

* ``CONTRACT``: every name both peers expose, with the same parameters (names, kinds,
  defaults). The compiled core's ``nested_ints`` and ``native_entries`` are the reference's
  own functions (the values they read are small, left intact in the parsed document).
* ``CORE_ONLY``: the core's other public functions, each with the reason the reference has
  none. The facade answers for the reference itself (``tokenwire.simd_paths()`` is ``[]`` and
  ``tokenwire.simd_path()`` is ``None`` without the core).
* ``REFERENCE_ONLY``: names this module has that the core lacks (none today).
"""

from .extract.python import extract_generate, extract_openai
from .kernels.python import (
    b64check_signed,
    b64decode,
    b64encode,
    blob,
    checked_compact_heads,
    checked_supports_compact_heads,
    compact_candidates,
    compact_heads,
    compact_rows,
    compact_rows_candidates,
    first_bad,
    first_bad_support,
    first_not_rising,
    first_out_of_range,
    heads,
    routed_row_count,
    int_list,
    native_entries,
    nested_ints,
    pad_ragged,
    pad_rows,
    ragged_lengths,
    rows_to_lists,
)
from .rules.generate import parse_generate_response
from .rules.openai import (
    parse_chat_completions_response,
    parse_completions_response,
    parse_sglang_generate_response,
)

CONTRACT = (
    # The kernels: the per-token loops as free functions, for the rules (``Evidence.kernels``)
    # and for code that holds arrays (``_select.kernels``: select_heads, the writers,
    # Ragged.to_lists, the renderers drop-in).
    "int_list",
    "first_bad",
    "first_not_rising",
    "first_out_of_range",
    "routed_row_count",
    "first_bad_support",
    "compact_rows",
    "compact_candidates",
    "compact_rows_candidates",
    "compact_heads",
    "checked_compact_heads",
    "checked_supports_compact_heads",
    "heads",
    "rows_to_lists",
    "b64decode",
    "b64encode",
    "b64check_signed",
    # The batch path's copies of many choices' rows into padded blocks (tokenwire.collate).
    "pad_rows",
    "ragged_lengths",
    "pad_ragged",
    # The readers of values left in a parsed document.
    "blob",
    "nested_ints",
    "native_entries",
    # The extractors: ``(document, top, choices)``, the evidence records the rules read.
    "extract_generate",
    "extract_openai",
    # The parsers the facade exports.
    "parse_generate_response",
    "parse_completions_response",
    "parse_chat_completions_response",
    "parse_sglang_generate_response",
)

CORE_ONLY = {
    "simd_paths": "the code paths of the C kernels; the reference has one path, Python's",
    "simd_path": "the C kernels' path in use; nothing to report without them",
    "set_simd_path": "forces the C kernels' path; the reference has no other path to force",
    "simd_path_forced": "set_simd_path for a block (tests); as set_simd_path",
    "set_memory_cache": "bounds tw_mem's block cache of the C buffers; the reference's arrays "
    "come from numpy's own allocator, which keeps no such cache",
    "memory_stats": "the state of that cache; as set_memory_cache",
    "StreamScan": "the stream readers' event scan in C (csrc/wire/tw_sse.c); the reference reads "
    "the events in read/_stream.py, its specification",
}

REFERENCE_ONLY: dict[str, str] = {}

__all__ = list(CONTRACT)
