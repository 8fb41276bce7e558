# cython: language_level=3, freethreading_compatible=True
"""The compiled core: C kernels over raw buffers, the GIL released around every hot loop."""

# One module, written as the files included below (each in this module's one namespace, the
# names of the files before it in scope); the C headers it calls are declared in _csrc.pxd.

import json
from dataclasses import MISSING as _dataclass_MISSING, fields as _dataclass_fields
import os
import sys
import warnings

import numpy as np

cimport numpy as cnp
from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from ._csrc cimport *

from .base._args import (check_input, check_itemsize, check_num_experts, check_offset, check_payload_root,
                         check_prompt_tokens, check_start, check_top_k, output_bytes)
from .base._errors import MalformedResponseError, invalid_json, truncated
from .base import _json, _table
from .base._types import Ragged
from .base._wire import COMPACT_FORMAT
from .extract import python as _extract
from .kernels import python as _kernels
from .rules import generate as _generate
from .rules import openai as _openai_rules

cnp.import_array()


cdef _seed_hashes():
    # The secret of every table whose keys a response chooses (csrc/base/tw_hash.h), drawn once.
    cdef bytes key = os.urandom(32)
    tw_hash_seed(<const uint8_t *><const char *>key)


_seed_hashes()


include "_core_mem.pxi"  # tw_mem's block cache under numpy; arrays over C memory
include "_core_simd.pxi"  # the code path of every C kernel
include "_core_base64.pxi"  # b64decode, b64encode
include "_core_rows.pxi"  # rows_to_lists
include "_fields.pxi"  # the TW_F_* field ids (generated from _table.py)
include "_core_scan.pxi"  # _Scan: one response's bytes and what the C scanner recorded
include "_core_kernels.pxi"  # the per-token loops as free functions (the kernels namespace)
include "_core_extract.pxi"  # the evidence of each choice, from the scan's records
include "_core_plain.pxi"  # generate responses without a head, straight from the scan
include "_core_parsers.pxi"  # the four response parsers
include "_core_facade.pxi"  # the facade's parsers for a bytes body read by this core
include "_core_batch.pxi"  # the batch path's kernels: rows copied into padded blocks
include "_core_direct.pxi"  # parse_batch: the plain path's choices written into the batch's rows
include "_core_stream.pxi"  # streamed responses: SSE events read in C (StreamScan)
