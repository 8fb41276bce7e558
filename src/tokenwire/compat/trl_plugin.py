"""pytest plugin: a test session with TRL's vLLM client patched by :mod:`tokenwire.compat.trl`.

    python -m pytest -p tokenwire.compat.trl_plugin tests/

The patch is applied while pytest loads its initial conftest files and removed when the
session ends; ``--tokenwire-no-patch`` or ``TOKENWIRE_TRL_PATCH=0`` turns it off. The header
says whether it is in; the terminal summary whether it stayed in for the whole session.
"""

from __future__ import annotations

from ._plugin import hooks

globals().update(hooks("trl", "trl.generation.vllm_client", "TOKENWIRE_TRL_PATCH", "trl_version"))
