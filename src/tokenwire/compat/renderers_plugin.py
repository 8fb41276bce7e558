"""pytest plugin: a test session with tokenwire's parsers patched into ``renderers.client``.

    python -m pytest -p tokenwire.compat.renderers_plugin tests/

The patch is applied while pytest loads its initial conftest files, before any conftest or
test module runs ``from renderers.client import ...``, and removed when the session ends.
Disable it with ``--tokenwire-no-patch`` or ``TOKENWIRE_RENDERERS_PATCH=0``.

The header of the run says whether the patch is active; the terminal summary says whether it
was still in place at the end (a test that unpatches it is reported) and which renderers
release the drop-in followed.
"""

from __future__ import annotations

from ._plugin import hooks

globals().update(hooks("renderers", "renderers.client", "TOKENWIRE_RENDERERS_PATCH", "renderers_version"))
