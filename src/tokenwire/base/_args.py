"""Checks of the arguments that callers (not responses) give: each raises TypeError or ValueError
naming the argument, before any kernel sees the value."""

from __future__ import annotations

import operator
import os
import re
from typing import Any

import numpy as np

INT64_MAX = 2**63 - 1
# struct formats of the items of a buffer that may be overwritten with arbitrary bytes
_PLAIN = re.compile(r"[@=<>!]?[bBhHiIlLqQnNefd?c]")


def int_arg(value: Any, name: str, low: int, high: int = INT64_MAX) -> int:
    """``value`` as a Python int in ``[low, high]``: an int or a numpy integer, never a bool."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    value = operator.index(value)
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], not {value}")
    return value


def _vector(values: Any, name: str, flat: bool, kinds: str, what: str) -> np.ndarray:
    # A private copy, made before any check: the checks, and the kernels after them (some
    # without the GIL), read this copy, so another thread or a gc callback writing the
    # caller's array cannot change a value once it has been checked.
    array = np.array(values, order="C")
    if flat:
        array = array.reshape(-1)
    elif array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, not {array.ndim}-D")
    # An empty list is a float64 array: emptiness excuses a wrong number kind, not a non-number.
    if array.dtype.kind not in kinds and (array.size or array.dtype.kind not in "fiub"):
        raise TypeError(f"{name} must hold {what}, not {array.dtype}")
    return array


def int_array(values: Any, name: str, dtype: Any, low: int, high: int, *, flat: bool = False) -> np.ndarray:
    """``values`` as a private C-contiguous 1-D array of ``dtype`` (any shape flattened when
    ``flat``), every value an integer in ``[low, high]`` checked before the cast (which could
    wrap)."""
    array = _vector(values, name, flat, "iu", "integers")
    if array.size and (array.min() < low or array.max() > high):
        raise ValueError(f"{name} must hold integers in [{low}, {high}]")
    return np.ascontiguousarray(array, dtype=dtype)


def real_array(values: Any, name: str, dtype: Any, *, flat: bool = False) -> np.ndarray:
    """``values`` as a private C-contiguous 1-D array of the float ``dtype`` (any shape
    flattened when ``flat``); real numbers only."""
    return np.ascontiguousarray(_vector(values, name, flat, "fiu", "real numbers"), dtype=dtype)


def check_input(data: Any) -> None:
    """``data`` is a str or a C-contiguous bytes-like object (the checks of a decoder's
    arguments go in this order: the input, then the output buffer, then the content)."""
    if isinstance(data, str):
        return
    try:
        contiguous = memoryview(data).c_contiguous
    except TypeError:
        contiguous = False
    if not contiguous:
        raise TypeError(f"expected str or a C-contiguous bytes-like object, not {type(data).__name__}")


def output_bytes(out: Any) -> np.ndarray:
    """The bytes of a caller's output buffer as a writable 1-D uint8 array over the same memory:
    any writable C-contiguous buffer, whatever its shape and item type, is its bytes in order."""
    try:
        view = memoryview(out)
    except TypeError:
        raise TypeError(f"out must be a writable bytes-like object, not {type(out).__name__}") from None
    if not _PLAIN.fullmatch(view.format):  # an object array's items are pointers: never bytes to overwrite
        raise TypeError(f"out must hold plain numbers or bytes, not items of format {view.format!r}")
    if view.readonly:
        raise ValueError("output buffer is read-only")
    if not view.c_contiguous:
        raise ValueError("output buffer must be C-contiguous")
    if view.nbytes == 0:  # memoryview cannot cast a view with a zero in its shape
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer(view.cast("B"), dtype=np.uint8)


def check_itemsize(itemsize: Any) -> int:
    """The byte width of a signed little-endian integer: 1, 2, 4 or 8."""
    if type(itemsize) is not int or itemsize not in (1, 2, 4, 8):
        raise ValueError(f"itemsize must be 1, 2, 4 or 8, not {itemsize!r}")
    return itemsize


def check_offset(data: Any, start: Any) -> int:
    """Where to start reading ``data`` (a str or a buffer ``check_input`` let through): an int
    from 0 to its length (characters of a str, bytes of a buffer)."""
    if type(start) is not int:
        raise TypeError(f"start must be an int, not {type(start).__name__}")
    length = len(data) if isinstance(data, str) else memoryview(data).nbytes
    if not 0 <= start <= length:
        raise ValueError(f"start {start} is outside the {length} characters or bytes of data")
    return start


def check_start(start: Any) -> int | None:
    """``prompt_logprob_start``: None or a non-negative int (the request's own value)."""
    if start is None:
        return None
    return int_arg(start, "prompt_logprob_start", 0)


def check_prompt_tokens(count: Any) -> int | None:
    """``prompt_tokens``: None or a non-negative int (the prompt's token count)."""
    if count is None:
        return None
    return int_arg(count, "prompt_tokens", 0)


def check_top_k(top_k: Any) -> int | None:
    """``top_k`` as a positive int or None (a numpy integer becomes an int)."""
    if isinstance(top_k, np.integer):  # numpy integers are ints (np.bool_ is not one)
        top_k = int(top_k)
    if top_k is not None and (type(top_k) is not int or top_k < 1):
        raise ValueError(f"top_k must be a positive int or None, not {top_k!r}")
    return top_k


def check_payload_root(payload_root: Any) -> str | None:
    """``payload_root`` as a str path or None: a str or an ``os.PathLike`` of one (never bytes)."""
    if payload_root is None:
        return None
    if not isinstance(payload_root, (str, os.PathLike)):
        raise TypeError(f"payload_root must be a str or os.PathLike path or None, not {type(payload_root).__name__}")
    root = os.fspath(payload_root)
    if not isinstance(root, str):
        raise TypeError(f"payload_root must be a str path, not {type(root).__name__}")
    if not root or "\0" in root:
        raise ValueError(f"payload_root must be a directory path, not {root!r}")
    return root


# The largest expert count: an expert id is a value of a routing array, int32 at the widest.
MAX_EXPERTS = 2**31


def check_routed_shape(shape: Any) -> tuple[int, int] | None:
    """``routed_experts_shape`` as ``(layers, topk)``, two ints in ``[1, 2**31)``, or None."""
    if shape is None:
        return None
    if not isinstance(shape, (tuple, list)) or len(shape) != 2:
        raise TypeError(f"routed_experts_shape must be (layers, topk), not {shape!r}")
    layers, topk = (int_arg(d, "routed_experts_shape", 1, MAX_EXPERTS - 1) for d in shape)
    return layers, topk


def check_num_experts(num_experts: Any) -> int | None:
    """``num_experts`` (a model's count of routed experts: every expert id is below it) as an
    int in ``[1, 2**31]``, or None."""
    return None if num_experts is None else int_arg(num_experts, "num_experts", 1, MAX_EXPERTS)
