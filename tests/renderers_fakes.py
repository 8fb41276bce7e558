"""Stand-ins for renderers' ``generate()`` end to end, as in renderers' own client tests: an
engine client whose ``post`` returns the response bytes, and a renderer that renders a fixed
prompt and parses nothing (so only the client's own work runs). Used by
``tests/test_compat_renderers.py`` and ``benchmarks/test_renderers_generate_bench.py``;
renderers and httpx are imported when used."""

from __future__ import annotations


class FakeRenderer:
    """Renders a fixed prompt and parses nothing: only the client's own work is timed."""

    supports_tools = True

    def render(self, messages, *, tools=None, add_generation_prompt=False):
        from renderers.base import RenderedTokens

        return RenderedTokens(token_ids=[1, 2, 3])

    def get_stop_token_ids(self):
        return [99]

    def parse_response(self, completion_ids, *, tools=None, prompt_ids=None):
        from renderers.base import ParsedResponse

        return ParsedResponse(content="")


class FakeClient:
    """AsyncOpenAI's ``post`` returning the response bytes, as an engine would."""

    base_url = "http://engine:8000/v1"

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    async def post(self, path, *, cast_to=dict, body=None, options=None):
        import httpx

        return httpx.Response(200, content=self.raw)
