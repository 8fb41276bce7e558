from typing import Any

import numpy as np

from ._errors import MalformedResponseError as MalformedResponseError
from ._types import GenerateChoice as GenerateChoice
from ._types import GenerateResponse as GenerateResponse
from ._types import Ragged as Ragged
from ._types import RoutedExperts as RoutedExperts

__version__: str
implementation: str

def parse_generate_response(
    raw: bytes | bytearray | memoryview | str | Any, *, top_k: int | None = ..., require_logprobs: bool = ...
) -> GenerateResponse: ...
def b64decode(data: bytes | bytearray | memoryview | str | Any, out: Any = ...) -> np.ndarray: ...
def simd_paths() -> list[str]: ...
def simd_path() -> str | None: ...
