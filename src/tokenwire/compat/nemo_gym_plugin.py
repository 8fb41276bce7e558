"""pytest plugin: a test session with tokenwire's NeMo-Gym drop-in patched in.

    python -m pytest -p tokenwire.compat.nemo_gym_plugin tests/

The patch (:func:`tokenwire.compat.nemo_gym.patch`) is applied while pytest loads its
initial conftest files, before test modules run ``from nemo_gym.server_utils import
get_response_json``, and removed when the session ends. Disable it with
``--tokenwire-no-nemo-gym-patch`` or ``TOKENWIRE_NEMO_GYM_PATCH=0``. The terminal summary says whether
the patch stayed in place for the whole session, and which tests reached the replacements.
"""

from __future__ import annotations

from ._plugin import count_calls, exercised, hooks

globals().update(hooks("nemo_gym", "NeMo-Gym", "TOKENWIRE_NEMO_GYM_PATCH", "nemo_gym_version",
                       option="--tokenwire-no-nemo-gym-patch", label="NeMo-Gym",
                       calls=count_calls, report=exercised))
