# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.

# --- memory: every array a parse makes comes from tw_mem's size-class cache ----------------------
#
# numpy's allocator while a parse runs, the cache's bound and counters, arrays that own memory
# from tw_mem (_adopt), and the data of an int64 array as a pointer (_i64).


cdef extern from "numpy/arrayobject.h":
    ctypedef struct PyDataMemAllocator:
        void *ctx
        void *(*alloc "malloc")(void *ctx, size_t size) noexcept nogil
        void *(*zalloc "calloc")(void *ctx, size_t nelem, size_t elsize) noexcept nogil
        void *(*resize "realloc")(void *ctx, void *ptr, size_t size) noexcept nogil
        void (*release "free")(void *ctx, void *ptr, size_t size) noexcept nogil
    ctypedef struct PyDataMem_Handler:
        char name[127]
        uint8_t version
        PyDataMemAllocator allocator
    object PyDataMem_SetHandler(object handler)


cdef void *_np_alloc(void *ctx, size_t size) noexcept nogil:
    return tw_mem_alloc(size)


cdef void *_np_zalloc(void *ctx, size_t nelem, size_t elsize) noexcept nogil:
    return tw_mem_calloc(nelem, elsize)


cdef void *_np_resize(void *ctx, void *ptr, size_t size) noexcept nogil:
    return tw_mem_realloc(ptr, size)


cdef void _np_release(void *ctx, void *ptr, size_t size) noexcept nogil:
    tw_mem_free(ptr)


# numpy's allocator for the arrays made while a parse runs (the arrays keep it for their free).
cdef PyDataMem_Handler _np_handler
memcpy(_np_handler.name, b"tokenwire", 10)
_np_handler.version = 1
_np_handler.allocator.ctx = NULL
_np_handler.allocator.alloc = _np_alloc
_np_handler.allocator.zalloc = _np_zalloc
_np_handler.allocator.resize = _np_resize
_np_handler.allocator.release = _np_release
_NP_HANDLER = PyCapsule_New(&_np_handler, "mem_handler", NULL)


def set_memory_cache(limit):
    """Bound the bytes tokenwire keeps cached for reuse by later parses (0 releases them all
    and caches nothing). Returns the previous bound."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError("limit must be an int (bytes)")
    if limit < 0:
        raise ValueError("limit must be >= 0")
    return tw_mem_set_limit(min(limit, 2**62))


def memory_stats():
    """The block cache now: cached bytes and blocks, its bound, and how many large requests
    it served (hits) or passed to the system (misses)."""
    cdef tw_mem_stats st
    tw_mem_get_stats(&st)
    return {"cached_bytes": st.cached_bytes, "cached_blocks": st.cached_blocks,
            "limit": st.limit, "hits": st.hits, "misses": st.misses}


cdef void _free_blob(object capsule) noexcept:
    tw_mem_free(PyCapsule_GetPointer(capsule, NULL))


cdef object _adopt(uint8_t *data, size_t size):
    """A uint8 array over ``data`` (from tw_mem), which it owns from now on (freed with it)."""
    return _adopt_typed(data, size, cnp.NPY_UINT8)


cdef object _adopt_typed(uint8_t *data, size_t count, int typenum):
    """A 1-d array of ``count`` elements of ``typenum`` over ``data`` (from tw_mem), which it
    owns from now on (freed with it)."""
    cdef cnp.npy_intp dims[1]
    try:
        owner = PyCapsule_New(data, NULL, _free_blob)
    except BaseException:
        tw_mem_free(data)
        raise
    dims[0] = <cnp.npy_intp>count
    out = cnp.PyArray_SimpleNewFromData(1, dims, typenum, data)
    cnp.set_array_base(out, owner)
    return out


cdef inline const int64_t *_i64(object a):
    cdef int64_t[::1] v = a
    return &v[0] if v.shape[0] else NULL
