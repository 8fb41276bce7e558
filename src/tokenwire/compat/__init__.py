"""Drop-in layers over other libraries' APIs, on tokenwire's readers.

:mod:`tokenwire.compat.renderers` replaces renderers' generate-client parsers (same
signatures, same return types) and patches them into ``renderers.client``;
:mod:`tokenwire.compat.renderers_plugin` is the pytest plugin that does so before a test
session imports renderers' names. Nothing here imports renderers until it is asked to.

:mod:`tokenwire.compat.eval_protocol` replaces eval-protocol's Fireworks completions client's
``create_completion_from_prompt_ids`` (:mod:`tokenwire.compat.eval_protocol_plugin`: its
pytest plugin); :mod:`tokenwire.compat.openai` reads the raw body of an OpenAI-SDK-shaped
client's ``with_raw_response`` calls, with no SDK object built (docs/frameworks.md).
"""
