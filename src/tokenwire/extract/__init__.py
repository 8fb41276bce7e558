"""Extractors: what was read of each choice of a response before its rules run.

:mod:`tokenwire.extract.python` holds the :class:`~tokenwire.extract.python.Evidence` record and
the pure-Python extractors, which read it from the parsed document. The compiled extractors in
``tokenwire._core`` are their peers: they fill the same records in one pass over the raw bytes.
Neither calls the other, and nothing here imports the core.
"""
