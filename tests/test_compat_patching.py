"""tokenwire.compat._patching: the patched() block and the release check every patching
drop-in shares, and the patch API each of them exports (no framework needed)."""

from __future__ import annotations

import importlib
import sys
import threading

import pytest

from tokenwire.compat import _patching


class _Patch:
    """A stand-in drop-in: what it replaced, and how often it patched and unpatched."""

    def __init__(self) -> None:
        self.lock, self.saved, self.log = threading.RLock(), {}, []

    def patch(self) -> None:
        self.log.append("patch")
        self.saved["f"] = "theirs"

    def unpatch(self) -> None:
        self.log.append("unpatch")
        self.saved.clear()

    def block(self, module: str | None = None):
        return _patching.block(self.lock, lambda: bool(self.saved), self.patch, self.unpatch, module)


def test_block_patches_then_leaves_the_state_it_found():
    p = _Patch()
    with p.block() as yielded:
        assert yielded is None and p.saved
        with p.block("sys") as module:  # nested: the outer block's patch stays
            assert module is sys
        assert p.saved and p.log == ["patch", "patch"]
    assert not p.saved and p.log == ["patch", "patch", "unpatch"]
    p.patch()
    with pytest.raises(KeyError), p.block():
        raise KeyError("inside")
    assert p.saved and p.log[-1] == "patch"  # patched before the block: still patched after


def test_release_check_names_the_releases_followed():
    _patching.require_release("trl", "TRL", "trl", "1.16.0", ("1.16.0",))
    for version in (None, "1.15.0"):
        with pytest.raises(RuntimeError, match=rf"does not support TRL {version}; it follows TRL 1\.16\.0 "
                                               r"\(pip install 'trl==1\.16\.0'\)"):
            _patching.require_release("trl", "TRL", "trl", version, ("1.16.0",))


@pytest.mark.parametrize("name", ["renderers", "eval_protocol", "nemo_gym", "trl", "verifiers", "skyrl"])
def test_each_patching_drop_in_exports_the_patch_api(name):
    if name == "nemo_gym":
        pytest.importorskip("orjson", reason="NeMo-Gym's reader is orjson's (a dependency of NeMo-Gym)")
    module = importlib.import_module(f"tokenwire.compat.{name}")
    assert set(_patching.API) <= set(module.__all__)
    assert all(hasattr(module, n) for n in _patching.API)
    assert isinstance(module.SUPPORTED_VERSIONS, tuple) and not module.is_patched()
