"""Drop-in layers over other libraries' APIs, on tokenwire's readers.

:mod:`tokenwire.compat.renderers` replaces renderers' generate-client parsers (same
signatures, same return types) and patches them into ``renderers.client``;
:mod:`tokenwire.compat.eval_protocol` replaces eval-protocol's Fireworks completions client's
``create_completion_from_prompt_ids`` (:mod:`tokenwire.compat.eval_protocol_plugin`: its
pytest plugin); :mod:`tokenwire.compat.openai` reads the raw body of an OpenAI-SDK-shaped
client's ``with_raw_response`` calls, with no SDK object built (docs/frameworks.md).

:mod:`tokenwire.compat.verifiers` patches verifiers' train client (``response_from_generate``,
and renderers' parsers under it); :mod:`tokenwire.compat.trl` patches TRL's vLLM client
(``VLLMClient._post`` and ``parse_logprobs``); :mod:`tokenwire.compat.nemo_gym` patches
NeMo-Gym's response reader and token-bundle checks. Each ``<name>_plugin`` module is the pytest
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
