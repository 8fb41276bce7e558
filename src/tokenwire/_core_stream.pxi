# Streamed responses (read/_stream.py is their specification): vLLM's generate, completions and
# chat SSE bodies read by tw_sse in one pass over the bytes, the GIL released, into growing
# owned buffers, and the document they stand for written out for the format's parser. tw_sse
# never refuses: at an event it is not sure of it stops, and ``export`` hands what it read to
# the specification, which goes on from there.

_SSE_FORMS = {"generate": TW_SSE_GENERATE, "completions": TW_SSE_COMPLETIONS, "chat": TW_SSE_CHAT}


cdef bytes _sse_bytes(const char *p, size_t n):
    return PyBytes_FromStringAndSize(p, n) if n else b""


cdef list _sse_fields(const tw_sse_field *f, size_t n, const char *store):
    return [(_sse_bytes(store + f[i].key, f[i].key_len).decode(), f[i].event,
             _sse_bytes(store + f[i].val, f[i].val_len)) for i in range(n)]


cdef class StreamScan:
    """One stream's events read in C: ``feed(bytes)`` is False once it declined (then
    ``export()`` gives what it read and the bytes left, for read/_stream.py to go on with);
    ``document()`` the whole-body document as bytes, or None where it leaves the end to
    read/_stream.py."""

    cdef tw_sse *s
    cdef bint busy  # a feed or document runs without the GIL: no second call meanwhile

    cdef _enter(self):
        if self.busy:
            raise RuntimeError("a StreamReader is being fed by another thread")
        self.busy = True

    def __cinit__(self, str form):
        if form not in _SSE_FORMS:
            raise ValueError(f"no stream scan for the {form!r} format")
        self.s = tw_sse_new(_SSE_FORMS[form])
        if self.s == NULL:
            raise MemoryError()

    def __dealloc__(self):
        tw_sse_free(self.s)

    def feed(self, bytes data):
        cdef const char *p = data
        cdef size_t n = PyBytes_GET_SIZE(data)
        cdef int rc, path = _path
        self._enter()
        try:
            with nogil:
                rc = tw_sse_feed(self.s, p, n, path)
        finally:
            self.busy = False
        if rc == TW_SSE_NOMEM:
            raise MemoryError()
        return rc == TW_SSE_OK

    def document(self):
        cdef size_t n, m
        cdef char *q
        if self.s.pending.n and _sse_bytes(self.s.pending.p, self.s.pending.n).strip() == b"data: [DONE]":
            self.feed(b"\n\n")  # [DONE] without its blank line: the body's end, as read/_stream.py takes it
        self._enter()
        try:
            with nogil:
                n = tw_sse_document(self.s, NULL)
            if n == 0:
                return None
            out = PyBytes_FromStringAndSize(NULL, n)
            q = PyBytes_AS_STRING(out)
            with nogil:
                m = tw_sse_document(self.s, q)
        finally:
            self.busy = False
        assert m == n
        return out

    def export(self):
        """What was read, as JSON text (bytes) for read/_stream.py to load: a dict."""
        cdef tw_sse *s = self.s
        cdef tw_sse_choice *c
        cdef size_t i, r
        if self.busy:
            raise RuntimeError("a StreamReader is being fed by another thread")
        choices = []
        for i in range(s.nchoices):
            c = &s.choices[i]
            choices.append({
                "index": c.index, "first_event": c.first_event, "last_event": c.last_event,
                "ids": _sse_bytes(c.ids.p, c.ids.n),
                "records": [_sse_bytes(c.rec[r].p, c.rec[r].n) for r in range(TW_SSE_RECORDS)],
                "has_records": None if c.has_records < 0 else bool(c.has_records),
                "sent_ids": bool(c.sent_ids),
                "text": _sse_bytes(c.text.p, c.text.n),
                "finish": _sse_bytes(c.finish.p, c.finish.n), "stop": _sse_bytes(c.stop.p, c.stop.n),
                "role": _sse_bytes(c.role.p, c.role.n), "prompt": _sse_bytes(c.prompt.p, c.prompt.n),
                "once": _sse_fields(c.once, c.nonce, c.store.p),
                "starts": [c.starts[r] for r in range(c.nstarts)],
                "events": [c.events[r] for r in range(c.nstarts)],
            })
        return {"event": s.event, "done": bool(s.done), "pending": _sse_bytes(s.pending.p, s.pending.n),
                "root": _sse_fields(s.root, s.nroot, s.root_store.p),
                "prompt": (s.prompt_event, _sse_bytes(s.prompt.p, s.prompt.n)) if s.prompt.n else None,
                "usage": _sse_bytes(s.usage.p, s.usage.n), "choices": choices}
