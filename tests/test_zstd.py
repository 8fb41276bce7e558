"""zstd input for ``tokenwire check`` and ``inspect``: told apart by its magic bytes, streamed,
several frames read as one stream, truncation reported (skipped without zstandard)."""

from __future__ import annotations

import sys

import pytest

from tokenwire.auditing import _capture
from tokenwire import cli

from .test_cli import MUTATIONS, _compact, _native, _packed, check, counts, line_of, report, write

zstandard = pytest.importorskip("zstandard")


def _records() -> list[bytes]:
    return [line_of(d) for d in (_packed(), _native(), _compact("csr"))] + [line_of(m()[0]) for m in MUTATIONS]


def _zst(path, data: bytes, frames: int = 1) -> str:
    step = -(-len(data) // frames)
    parts = [zstandard.ZstdCompressor(level=3).compress(data[i : i + step]) for i in range(0, len(data), step)]
    path.write_bytes(b"".join(parts))
    return str(path)


def test_zstd_reads_as_plain(tmp_path, capsys, monkeypatch):
    records = _records()
    plain = write(tmp_path / "plain.jsonl", records)
    data = b"".join(r + b"\n" for r in records)
    expected = report(capsys, plain)[1]
    monkeypatch.setattr(_capture, "BLOCK", 2048)  # blocks cut inside frames and lines
    for frames in (1, 5):
        path = _zst(tmp_path / f"capture{frames}.bin", data, frames)  # the name says nothing
        status, result = report(capsys, path)
        assert status == 1
        assert counts(result) == counts(expected)
        assert (result["records"], result["bytes"]) == (expected["records"], expected["bytes"])
        assert result["files"][0]["bytes"] == (tmp_path / f"capture{frames}.bin").stat().st_size


def test_zstd_in_directories_and_inspect(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    _zst(tmp_path / "d" / "a.jsonl.zst", b"".join(r + b"\n" for r in _records()[:3]))
    (tmp_path / "d" / "notes.zst").write_bytes(b"ignored")
    status, out, _ = check(capsys, str(tmp_path / "d"))
    assert status == 0 and "checked 3 records" in out and "in 1 file " in out
    status = cli.main(["inspect", str(tmp_path / "d" / "a.jsonl.zst"), "--line", "2"])
    out = capsys.readouterr().out
    assert status == 0 and "a.jsonl.zst:2:" in out and "valid" in out


def test_truncated_zstd(tmp_path, capsys):
    data = b"".join(r + b"\n" for r in _records()[:3]) * 40
    path = _zst(tmp_path / "cut.jsonl.zst", data, frames=4)
    whole = (tmp_path / "cut.jsonl.zst").read_bytes()
    (tmp_path / "cut.jsonl.zst").write_bytes(whole[: len(whole) * 3 // 4 + 5])
    status, out, err = check(capsys, path)
    assert status == 2
    assert "damaged zstd stream" in err and "ends inside a frame" in err
    assert "checked " in out and "not read to the end" in out


def test_zstd_without_zstandard(tmp_path, capsys, monkeypatch):
    path = _zst(tmp_path / "a.jsonl.zst", _records()[0] + b"\n")
    monkeypatch.setitem(sys.modules, "zstandard", None)
    monkeypatch.setitem(sys.modules, "compression", None)
    status, out, err = check(capsys, path)
    assert status == 2 and out == ""
    assert "reading zstd needs the zstandard package" in err and "pip install 'tokenwire[zstd]'" in err


def test_frames_are_cut_along_their_blocks(tmp_path):
    """Frames with and without a checksum or a content size, a skippable frame between them
    and a highly compressible one, read at any size, give the content back; bytes after the
    last frame that are no frame are damage."""
    import io

    parts = [b"".join(b"%d," % i for i in range(50_000)), b"\0" * (3 << 20), b"", b"tail\n"]
    frames = [
        zstandard.ZstdCompressor(level=3, write_checksum=True).compress(parts[0]),
        zstandard.ZstdCompressor(level=19, write_content_size=False).compress(parts[1]),
        b"\x5a\x2a\x4d\x18" + (5).to_bytes(4, "little") + b"skip!",  # a skippable frame
        zstandard.ZstdCompressor().compress(parts[2]),
        zstandard.ZstdCompressor(write_checksum=True).compress(parts[3]),
    ]
    data = b"".join(frames)
    for size in (1, 4093, 1 << 22):
        stream = _capture._ZstdFrames(io.BytesIO(data), zstandard)
        got = []
        while block := stream.read(size):
            assert len(block) <= size
            got.append(block)
        assert b"".join(got) == b"".join(parts), size
    stream = _capture._ZstdFrames(io.BytesIO(data + b"junk"), zstandard)
    with pytest.raises(zstandard.ZstdError, match="no zstd frame at byte"):
        while stream.read(1 << 20):
            pass
