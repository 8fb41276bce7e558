"""Drop-in layers over other libraries' APIs, on tokenwire's readers.

:mod:`tokenwire.compat.renderers` replaces renderers' generate-client parsers (same
signatures, same return types) and patches them into ``renderers.client``;
:mod:`tokenwire.compat.verifiers` patches verifiers' train client (``response_from_generate``,
and renderers' parsers under it); :mod:`tokenwire.compat.trl` patches TRL's vLLM client
(``VLLMClient._post`` and ``parse_logprobs``). Each ``<name>_plugin`` module is the pytest
plugin that patches before a test session imports the framework's names. Nothing here imports
a framework until it is asked to.
"""

from __future__ import annotations

import importlib.metadata


def distribution_version(name: str) -> str | None:
    """The installed version of distribution ``name`` (its metadata), None when absent."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
