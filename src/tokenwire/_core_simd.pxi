# Part of the compiled core: _core.pyx includes it, in one namespace with the other parts.

# --- the SIMD path of every C kernel -------------------------------------------------------------


_PATHS = {"scalar": TW_PATH_SCALAR, "avx2": TW_PATH_AVX2, "avx512": TW_PATH_AVX512,
          "neon": TW_PATH_NEON}

# The one process-wide setting: the code path of every C kernel (the structural scanner, the
# record readers, head selection, row validation, base64), one TW_PATH_* of tw_cpu.h. Read
# from TOKENWIRE_SIMD at import, changed only by set_simd_path() (tests use it, or
# simd_path_forced, to cover every path); each parse reads it once when it starts.
cdef int _path = tw_path_best()


def simd_paths():
    """Names of the code paths this CPU can run, best last."""
    return [name for name, p in _PATHS.items() if tw_path_available(p)]


def simd_path():
    return tw_path_name(_path).decode()


def set_simd_path(name):
    """Force the code path of every C kernel (``None`` or ``"auto"``: the best one). Returns
    the previous name."""
    global _path
    previous = simd_path()
    if name is None or name == "auto":
        _path = tw_path_best()
    elif name not in _PATHS:
        raise ValueError(f"unknown SIMD path {name!r}; choose from {sorted(_PATHS)}")
    elif not tw_path_available(_PATHS[name]):
        raise ValueError(f"this CPU cannot run the {name} path")
    else:
        _path = _PATHS[name]
    return previous


class simd_path_forced:
    """``with simd_path_forced("scalar"): ...`` runs every C kernel on that path inside the
    block and restores the previous path on leaving it (for tests: the setting is
    process-wide, so concurrent parses in other threads see it too)."""

    def __init__(self, name):
        self.name = name
        self.previous = None

    def __enter__(self):
        self.previous = set_simd_path(self.name)
        return self.name

    def __exit__(self, *exc):
        set_simd_path(self.previous)
        return False


_forced = os.environ.get("TOKENWIRE_SIMD", "").strip().lower()
if _forced:
    try:
        set_simd_path(_forced)
    except ValueError as exc:
        warnings.warn(f"TOKENWIRE_SIMD ignored: {exc}", RuntimeWarning, stacklevel=2)
