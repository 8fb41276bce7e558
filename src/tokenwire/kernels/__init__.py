"""The per-token loops as free functions.

:mod:`tokenwire.kernels.python` is the reference; the compiled core ``tokenwire._core`` has the
same names in C. An evidence record names the set that read it (``Evidence.kernels``), so the
rules run on whichever set the extractor used.
"""
