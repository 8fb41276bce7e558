# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.

# --- the facade's parsers, compiled -----------------------------------------------------------------
#
# read/_facade.py's parser (the definition) made again for the common call: a bytes body read
# by this core. Everything else (a str, a buffer or a response object; the reference or a
# stand-in as tokenwire.read._select.impl) goes to the Python parser. A small body's parse
# is a few microseconds, of which the Python wrapper, its keyword dictionary and the lookup
# of the implementation's parser by name took about a twentieth.


def _facade_parser(str fmt, object select, object python_parser, object core_parser, object other_format,
                   object object_error):
    """The compiled twin of read/_facade.py's parser of ``fmt``: ``select`` is
    tokenwire.read._select (its ``impl`` read at each call), ``python_parser`` the Python
    parser, ``core_parser`` this module's parser of ``fmt``; ``other_format(raw, exc)`` the
    error for a body of another known format (None: ``exc`` stands), ``object_error(obj)``
    the error for a body whose OpenAI ``object`` another parser reads (None: none)."""
    core = sys.modules[__name__]
    cdef bint objects = fmt != "sglang"  # an SGLang item has no OpenAI ``object``
    cdef bint generate = fmt == "generate"

    # ``top_k``, the one option of the common calls, is taken as a keyword of its own: a call
    # with it alone then fills no keyword dictionary (``options`` stays empty).
    def parser(raw, *, top_k=_NO_TOP_K, **options):
        if type(raw) is not bytes or select.impl is not core:
            return python_parser(raw, **_with_top_k(options, top_k))
        try:
            if generate:
                response = _generate_call(raw, top_k, options)
            else:
                response = core_parser(raw, **_with_top_k(options, top_k))
        except MalformedResponseError as exc:
            other = other_format(raw, exc)
            if other is None:
                raise
            raise other from exc
        if objects:
            payload = getattr(response, "payload", None)
            if type(payload) is dict:  # the common case, without a method call
                obj = (<dict>payload).get("object")
            else:
                obj = payload.get("object") if isinstance(payload, dict) else None
            if isinstance(obj, str):
                error = object_error(obj)
                if error is not None:
                    raise error
        return response

    return parser
