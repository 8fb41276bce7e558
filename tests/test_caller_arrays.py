"""Arrays and buffers a caller passes are read once.

A gc callback that the library's own allocations run, or another thread writing the caller's
array (holding the GIL or not), can change what a call reads, but never make the compiled core
write or read past what it sized, nor make a result disagree with the checks it passed: rows
are cut from the values, heads hold finite logprobs and distinct ids, whatever a writer
returns the readers accept, and a Blob holds canonical base64 only.

Each case runs in a child process on the implementation the ``impl`` fixture names (a crash
fails the test, not the run; under ASan the child reports the bad access and aborts)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

try:
    from tokenwire import _core
except ImportError:  # pure-Python install
    _core = None

ROOT = Path(__file__).parent.parent  # the child imports tests.mutation from here
PRELUDE = textwrap.dedent('''
    import base64, gc, sys, threading
    import numpy as np
    import tokenwire
    from tokenwire import MalformedResponseError
    from tests.mutation import rewritten_at

    ALLOWED = (MalformedResponseError, ValueError, TypeError)

    def at_each_collection(call, mutate, restore, check, limit=3000):
        """call() once per collection point: in run k the k-th collection the call runs
        mutates the caller's arrays and the next one restores them, for every k up to the
        number of collections one call runs; check() sees every result."""
        for k in range(1, limit):
            restore()
            with rewritten_at(k, mutate, restore) as seen:
                try:
                    result = call()
                except ALLOWED as exc:
                    result = exc
            check(result)
            if seen[0] < k:
                return k
        return limit

    def cut_rows(rows, values):
        """Every row is a run of consecutive values (values[i] == i here)."""
        for row in rows:
            assert row == values[int(row[0]):int(row[0]) + len(row)] if row else True, row[:5]
''')


def _run(impl, body: str, timeout: int = 300) -> str:
    env = dict(os.environ)
    if _core is None or impl is not _core:
        env["TOKENWIRE_NO_EXTENSIONS"] = "1"
    else:
        env["TOKENWIRE_SIMD"] = _core.simd_path()
    result = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"exit {result.returncode}: {result.stdout[-500:]}{result.stderr[-3000:]}"
    assert result.stdout.strip().endswith("done"), result.stdout[-2000:]
    return result.stdout


def test_to_lists_offsets_rewritten_by_a_gc_callback(impl):
    """The row lists' own allocations run the collector; a callback moving every offset to
    the end must not make the fill write a long row into a list sized for one item."""
    _run(impl, '''
        n = 20_000
        offsets, values = np.arange(n + 1), np.arange(n)
        def hook(phase, info):
            if phase == "start":
                offsets[1:] = n
        gc.callbacks.append(hook)
        try:
            rows = tokenwire.Ragged(offsets, values).to_lists()
            offsets[:] = np.arange(n + 1)
            both = tokenwire.read._select.kernels.rows_to_lists(offsets, values, values.astype(np.float32))
        finally:
            gc.callbacks.remove(hook)
        flat = list(range(n))
        for got in (rows, both[0], both[1]):
            assert [x for row in got for x in row] == flat
            cut_rows(got, flat)
        assert [len(r) for r in both[0]] == [len(r) for r in both[1]]  # one read of the offsets
        print("done")
    ''')


def test_to_lists_offsets_rewritten_by_a_thread_without_the_gil(impl):
    """b64decode(out=...) writes the caller's offsets with the GIL released, while the
    rows are sized and filled. The reference's writer and reader both hold the GIL, so each
    of its rounds takes about a hundred times as long (0.3 s, and several times that on a
    loaded machine): it runs 20 rounds, the compiled core 300."""
    rounds = 300 if impl is _core else 20
    _run(impl, f"\n        rounds = {rounds}" + '''
        n = 20_000
        offsets, values = np.arange(n + 1), np.arange(n)
        ends = np.full(n + 1, n)
        ends[0] = 0
        states = [tokenwire.b64encode(a.tobytes()) for a in (np.arange(n + 1), ends)]
        stop = False
        def writer():
            target = offsets.view(np.uint8)
            while not stop:
                for state in states:
                    tokenwire.b64decode(state, out=target)
        thread = threading.Thread(target=writer)
        thread.start()
        flat = list(range(n))
        try:
            for _ in range(rounds):
                cut_rows(tokenwire.Ragged(offsets, values).to_lists(), flat)
        finally:
            stop = True
            thread.join()
        print("done")
    ''')


def test_select_heads_arrays_rewritten_between_checks(impl):
    """A candidate logprob turned NaN and a candidate id repeated after the checks: a head
    never holds what the checks refuse, on either form of candidates."""
    _run(impl, '''
        n, width, k = 24, 6, 3
        lps = np.log(np.array([0.4, 0.2, 0.1, 0.05, 0.03, 0.02]))
        ids = (np.arange(n * width) * 7 % 1000).astype(np.int64)
        logprobs = np.tile(lps, n)
        offsets = np.arange(0, n * width + 1, width)
        sampled, sampled_lps = ids[::width].copy(), np.full(n, lps[0])
        support_ids = ids.reshape(n, width)[:, :2].reshape(-1).astype(np.int32)
        support_offsets = np.arange(0, 2 * n + 1, 2)
        good = ids.copy(), logprobs.copy(), support_ids.copy()
        for form in ("distinct", "compact", "support"):
            given_lps = logprobs.astype(np.float32) if form == "compact" else logprobs
            def mutate():
                given_lps[width + 1] = np.nan
                ids[2 * width + 1] = ids[2 * width + 2]
                support_ids[4] = -7
            def restore():
                ids[:], given_lps[:], support_ids[:] = good[0], good[1], good[2]
            def call():
                extra = {"num_top": width} if form == "compact" else {}
                if form == "support":
                    extra = {"support_ids": support_ids, "support_offsets": support_offsets}
                return tokenwire.select_heads(ids, given_lps, offsets, sampled, sampled_lps, k, **extra)
            def check(result):
                if isinstance(result, Exception):
                    return
                top_ids, top_lps = result
                assert np.isfinite(top_lps.values).all() and (top_lps.values <= 1e-6).all(), form
                for row in top_ids.to_lists():
                    assert len(set(row)) == len(row), (form, row)
                assert (top_ids.values >= 0).all(), form
            runs = at_each_collection(call, mutate, restore, check)
            print(form, runs)
        print("done")
    ''')


def test_writers_output_is_what_they_checked(impl):
    """Every writer's output is read back by the parser: an array rewritten between the
    writer's checks and its encoding would make it emit what the readers refuse."""
    _run(impl, '''
        n = 32
        token_ids = list(range(5, 5 + n))
        packed = np.full(n, -0.5, dtype=np.float32)
        routing = np.ones((n - 1, 2, 2), dtype=np.int16)
        row_ids = np.repeat(np.array(token_ids, dtype=np.int64), 2)
        row_ids[1::2] += 1000
        row_lps = np.full(2 * n, -0.25)
        row_offsets = np.arange(0, 2 * n + 1, 2)
        mask_ids = row_ids.astype(np.int32)
        mask_counts = np.full(n, 2, dtype=np.int32)
        arrays = [packed, routing, row_ids, row_lps, row_offsets, mask_ids, mask_counts]
        good = [a.copy() for a in arrays]
        def mutate():
            packed[3] = np.nan
            routing[2, 1, 0] = -1
            row_ids[4] = 2**40
            row_lps[6] = np.inf
            row_offsets[5] = 0
            mask_ids[7] = -3
            mask_counts[1] = 3
        def restore():
            for array, saved in zip(arrays, good):
                array[...] = saved
        logprobs = tokenwire.encode_packed(good[0])
        cases = {
            "packed": lambda: {"completion_logprobs": tokenwire.encode_packed(packed)},
            "routed": lambda: {"completion_logprobs": logprobs,
                               "routed_experts": tokenwire.encode_routed_experts(routing)},
            "compact": lambda: {"compact_logprobs": tokenwire.encode_compact_logprobs(
                row_ids, row_lps, row_offsets, 2)},
            "mask": lambda: {"completion_logprobs": logprobs, "sampling_mask": tokenwire.encode_sampling_mask(
                mask_ids, mask_counts, completion_ids=token_ids)},
            "kept": lambda: {"completion_logprobs": logprobs, "kept_tokens": tokenwire.encode_kept_tokens(
                mask_ids, mask_counts, completion_ids=token_ids)},
        }
        for name, fields in cases.items():
            outcomes = []
            def check(result):
                # The writer may refuse; what it returned, the readers must accept.
                outcomes.append(type(result).__name__)
                if not isinstance(result, Exception):
                    raw = tokenwire.dumps_generate_response({"choices": [dict(token_ids=token_ids, **result)]})
                    tokenwire.parse_generate_response(raw)
            runs = at_each_collection(fields, mutate, restore, check)
            print(name, runs, sorted(set(outcomes)))
        print("done")
    ''')


def test_blob_keeps_the_text_it_checked(impl):
    """A bytearray rewritten by another thread while Blob checks it: the Blob holds canonical
    base64 that decodes to its array, never the other state (a quote and a key the caller
    never wrote, which dumps_generate_response would splice into the JSON)."""
    out = _run(impl, '''
        valid = tokenwire.b64encode(bytes(range(256)) * 80)  # 20 KiB of bytes: decoded without the GIL
        injected = b'","injected":true,"x":"'
        states = [np.frombuffer(injected + valid[len(injected):], np.uint8), np.frombuffer(valid, np.uint8)]
        buf = bytearray(valid)
        array = np.frombuffer(bytes(range(256)) * 80, np.uint8)  # its decoding, checked too
        stop = False
        def writer():  # numpy copies without the GIL
            target = np.frombuffer(buf, np.uint8)
            while not stop:
                for state in states:
                    target[:] = state
        thread = threading.Thread(target=writer)
        thread.start()
        made = refused = 0
        wrong = []
        try:
            # valid is the only canonical state (every other one has a quote in its first
            # bytes): a Blob holds exactly it, or Blob refused the snapshot it read.
            for _ in range(50_000):
                try:
                    blob = tokenwire.Blob(buf, array)
                except ValueError:
                    refused += 1
                    continue
                made += 1
                if blob.text != valid:
                    wrong.append(blob)
                    break
        finally:
            stop = True
            thread.join()
        print(made, refused)
        for blob in wrong:
            print(tokenwire.dumps_generate_response({"x": blob}, check=False)[:40])
        assert not wrong, "the Blob holds text it never checked"
        assert tokenwire.b64decode(blob.text).tobytes() == blob.array.tobytes() == array.tobytes()
        print("done")
    ''')
    made = int(out.split()[0])
    assert made > 0  # the race was run: some snapshots were the valid state


COLLATE_PRELUDE = '''
    import dataclasses
    from tokenwire import GenerateChoice, Ragged

    def one_id_heads(n):
        """One choice of n tokens whose heads hold one id each (the head width is 64)."""
        return GenerateChoice(index=0, completion_ids=np.ones(n, dtype=np.int64),
                              completion_logprobs=np.zeros(n, dtype=np.float32),
                              completion_top_ids=Ragged(np.arange(n + 1), np.ones(n, dtype=np.int64)),
                              completion_top_logprobs=Ragged(np.arange(n + 1), np.zeros(n, dtype=np.float32)))
'''


def test_collate_out_lengths_a_view_of_out_ids(impl):
    """An ``out`` whose completion_top_lengths is a view of the first items of its
    completion_top_ids: the head copies used to re-read the lengths the id copy had just
    overwritten (with the pad id, 63) and read far past the head values. Refused before
    anything is written, on both implementations."""
    _run(impl, textwrap.dedent(COLLATE_PRELUDE) + textwrap.dedent('''
        n = 1 << 16
        choice = one_id_heads(n)
        batch = tokenwire.collate([choice], head_width=64, pad_id=63)
        aliased = dataclasses.replace(batch, completion_top_lengths=batch.completion_top_ids.reshape(-1)[:n].reshape(1, n))
        try:
            tokenwire.collate([choice], head_width=64, pad_id=63, out=aliased)
        except ValueError as exc:
            assert "share memory" in str(exc), exc
        else:
            raise AssertionError("out's arrays sharing memory accepted")
        again = tokenwire.collate([choice], head_width=64, pad_id=63, out=batch)
        assert again.completion_top_lengths is batch.completion_top_lengths
        assert (again.completion_top_lengths == 1).all() and (again.completion_top_ids[0, :, 1:] == 63).all()
        print("done")
    '''))


def test_collate_out_lengths_rewritten_by_a_thread_without_the_gil(impl):
    """Another thread setting out.completion_top_lengths to the head width (numpy's copy
    runs without the GIL) while collate writes into it: the copies read the lengths they
    checked, never the rewritten ones, so every head holds its one id."""
    _run(impl, textwrap.dedent(COLLATE_PRELUDE) + textwrap.dedent('''
        n = 1 << 18 if tokenwire.implementation == "c" else 1 << 16
        choice = one_id_heads(n)
        batch = tokenwire.collate([choice], head_width=64)
        stop = False
        def rewrite():
            while not stop:
                np.copyto(batch.completion_top_lengths, 64)
        writer = threading.Thread(target=rewrite)
        writer.start()
        try:
            for _ in range(8):
                result = tokenwire.collate([choice], head_width=64, out=batch)
                assert (result.completion_top_ids[0, :, 0] == 1).all()
                assert (result.completion_top_ids[0, :, 1:] == 0).all()
        finally:
            stop = True
            writer.join()
        print("done")
    '''))
