"""Every accept/reject rule, written once, as functions over the parsed document and its
evidence: :mod:`tokenwire.rules.generate` for the generate endpoint and
:mod:`tokenwire.rules.openai` for the OpenAI-compatible and SGLang formats. With the pure-Python
extractor and kernels they are also the pure-Python implementation.
"""
