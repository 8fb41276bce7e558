"""Drop-in layers over other libraries' APIs, on tokenwire's readers.

:mod:`tokenwire.compat.renderers` replaces renderers' generate-client parsers (same
signatures, same return types) and patches them into ``renderers.client``;
:mod:`tokenwire.compat.renderers_plugin` is the pytest plugin that does so before a test
session imports renderers' names. Nothing here imports renderers until it is asked to.
"""
