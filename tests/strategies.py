"""Hypothesis strategies: plausible responses of every transport, every spelling, and a
mutation of every rule. Each case says which mutation it carries, so a test knows whether
renderers is expected to disagree (a documented difference) or not."""

from __future__ import annotations

import base64
import io
import json
import math
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tokenwire import samples

# Mutations where tokenwire is deliberately stricter than renderers (see the README).
STRICTER_THAN_RENDERERS = {
    "token_ids.missing",
    "token_ids.negative_packed",
    "token_ids.bool",
    "token_ids.float",
    "token_ids.huge",
    "packed.dtype",
    "packed.shape",
    "packed.base64_noncanonical",
    "routed.shape",
    "routed.dtype",
    "routed.start",
    "routed.base64",
    "routed.npy_header",
    "routed.rows",
    "prompt.negative",
    "choices.empty",
    "choices.not_list",
    "document.not_object",
    "choice.not_object",
    "later_choice",  # renderers reads only the first choice
    "mask.without_head",  # renderers checks a mask only when it selects a head
    "mask.shape_bool",
    "native.unicode_digits",
    "bytes.truncate",
    "bytes.flip",
    # renderers does not read prime-rl's by-handle payload segments.
    "payload.rows",
    "payload.dtype",
    "payload.form",
    "payload.file",
    "payload.offset",
}


# Mutations tokenwire reads otherwise than renderers (docs/migrating-from-renderers.md): an
# empty sampling_mask row is a token without a recorded support (prime-rl's zero counts),
# where renderers refuses the mask. read_otherwise() finds such rows in any case.
READ_OTHERWISE_THAN_RENDERERS = {"mask.empty_row"}


def read_otherwise(case: Case) -> bool:
    """Whether tokenwire reads ``case`` otherwise than renderers on purpose: a choice whose
    sampling_mask has an empty row (a list) or a zero count (the packed form)."""
    if case.mutation in READ_OTHERWISE_THAN_RENDERERS:
        return True
    try:
        document = json.loads(case.raw)
    except ValueError:
        return False
    for choice in document.get("choices") or [] if isinstance(document, dict) else []:
        mask = choice.get("sampling_mask") if isinstance(choice, dict) else None
        if isinstance(mask, list) and any(row == [] for row in mask):
            return True
        counts = mask.get("counts") if isinstance(mask, dict) else None
        data = counts.get("data") if isinstance(counts, dict) else None
        if isinstance(data, str):
            try:
                if 0 in np.frombuffer(samples.base64.b64decode(data), "<i4"):
                    return True
            except ValueError:
                pass
    return False


@dataclass
class Case:
    raw: bytes
    top_k: int | None
    mutation: str | None = None
    spelling: str = "compact"
    notes: list[str] = field(default_factory=list)  # fields renderers does not read
    num_experts: int | None = None  # the bound on routed_experts' expert ids it is parsed with


# Probabilities with exact ties and a long tail, so heads hit every branch.
_PROBS = [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.2, 0.1, 0.05, 0.6, 0.3]


@st.composite
def evidence(draw, n: int, m: int, with_support: bool) -> samples.TokenEvidence:
    if draw(st.booleans()):  # realistic distributions
        return samples.evidence(n, m, seed=draw(st.integers(0, 2**16)), support=with_support, width=max(m, 1) + 8)
    # Small alphabets: ties, repeats and the sampled id inside or outside the candidates.
    alphabet = max(12, m + 3)  # small, so ids repeat, yet room for m distinct candidates
    ids = np.array([draw(st.integers(0, alphabet)) for _ in range(n)], dtype=np.int64)
    lps = np.array([math.log(draw(st.sampled_from(_PROBS))) for _ in range(n)], dtype=np.float32)
    cand_ids = np.zeros((n, m), dtype=np.int64)
    cand_lps = np.zeros((n, m), dtype=np.float32)
    support = [] if with_support else None
    for t in range(n):
        row = draw(st.lists(st.integers(0, alphabet), min_size=m, max_size=m, unique=True))
        vals = sorted((math.log(draw(st.sampled_from(_PROBS))) for _ in range(m)), reverse=True)
        if m and draw(st.booleans()):
            row[draw(st.integers(0, m - 1))] = int(ids[t]) if int(ids[t]) not in row else row[0]
        if m and draw(st.integers(0, 5)) == 0:
            vals[-1] = samples.SENTINEL
        cand_ids[t] = row
        cand_lps[t] = vals
        if int(ids[t]) in row:  # a consistent sampled value, most of the time
            if draw(st.integers(0, 7)):
                lps[t] = cand_lps[t][row.index(int(ids[t]))]
        if support is not None:
            size = draw(st.integers(1, max(m, 1)))
            chosen = list(dict.fromkeys([int(ids[t]), *row[:size]]))[:size]
            support.append(chosen if draw(st.integers(0, 9)) else chosen[1:])
    return samples.TokenEvidence(ids, lps, cand_ids, cand_lps, support)


@st.composite
def choices(draw, index: int, k: int | None, newer: bool = True, prompt_len: int = 0) -> dict[str, Any]:
    """A choice after a prompt of ``prompt_len`` tokens (its routing a row per prompt and
    completion token but the last); ``newer`` False leaves out the forms renderers does not
    read (kept_tokens, logprobs.sampled, logprobs.top_k)."""
    n = draw(st.integers(0, 5))
    transport = draw(st.sampled_from(["native", "packed", "compact", *(["sampled", "native_sampled", "top_k"] if newer else [])]))
    m = draw(st.integers(0, (k or 2) + 3))
    mask = draw(st.sampled_from([None, None, "list", "csr", *(["kept"] if newer else [])]))
    ev = draw(evidence(n, m, mask is not None))
    if mask == "kept":  # prime-rl's rows without a kept set (zero counts), anywhere
        ev.support = [[] if draw(st.integers(0, 2)) == 0 else row for row in ev.support]
    routed = None
    if draw(st.integers(0, 3)) == 0:
        routed = samples.routing(max(prompt_len + n - 1, 0), layers=2, topk=2, experts=draw(st.sampled_from([8, 300])))
    choice = samples.build_choice(
        ev,
        transport=transport,
        index=index,
        num_top=draw(st.sampled_from([None, None, -1, 0, 1, m + 1])),
        mask=mask,
        routed=routed,
        routed_form=draw(st.sampled_from(["dict", "npy"])),
    )
    if newer and draw(st.integers(0, 2)) == 0:
        choice["weight_versions"] = draw(weight_versions(n))
    if newer and mask in ("list", "csr") and draw(st.integers(0, 2)) == 0:
        choice["sampling_mask_logprobs"] = draw(mask_logprobs(ev.support))
    return choice


@st.composite
def mask_logprobs(draw, rows: list[list[int]]) -> list[list[float]]:
    """prime-rl's sampling_mask_logprobs for mask ``rows``: each row renormalized over its
    kept ids (float32, flat or peaked), now and then -9999 throughout (a row not captured)."""
    out = []
    for row in rows:
        if row and draw(st.integers(0, 5)) == 0:
            out.append([samples.SENTINEL] * len(row))
            continue
        weights = np.array([draw(st.sampled_from([1.0, 1.0, 0.01, 50.0])) for _ in row], dtype=np.float64)
        out.append(np.log(weights / weights.sum()).astype(np.float32).tolist() if row else [])
    return out


@st.composite
def weight_versions(draw, n: int) -> list[dict[str, Any]] | None:
    """Weight-version spans over ``n`` tokens as vLLM and SGLang write them: in order,
    contiguous, from 0 to ``n``; an empty completion has none (vLLM) or one empty span
    (SGLang); or null."""
    if draw(st.integers(0, 5)) == 0:
        return None
    if n == 0:
        return draw(st.sampled_from([[], [{"version": "default", "start": 0, "end": 0}]]))
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=min(3, n - 1)))) if n > 1 else []
    bounds = [0, *cuts, n]
    first = draw(st.integers(0, 40))
    return [{"version": f"step-{first + i}", "start": a, "end": b} for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]


# How the native records of a generate response name their tokens (vLLM's output_mode):
# ids (no output_mode, or "tokens"), decoded text under output_mode "text", "token_id:N"
# placeholders under "text" (--return-tokens-as-token-ids), or decoded text in a response
# that does not say "text" (which must fail, and say why).
OUTPUT_MODES = [None] * 8 + ["tokens", "text", "text_ids", "text_unsaid"]


def _as_text(document: dict[str, Any], mode: str) -> None:
    """Turn the records of every choice into what ``mode`` sends (see OUTPUT_MODES)."""
    if mode in ("tokens", "text", "text_ids"):
        document["output_mode"] = "tokens" if mode == "tokens" else "text"
    if mode not in ("text", "text_unsaid"):
        return
    for choice in document["choices"]:
        logprobs = choice.get("logprobs")
        for entry in (logprobs.get("content") or []) if isinstance(logprobs, dict) else []:
            for record in [entry, *(entry.get("top_logprobs") or [])]:
                record["token"] = "t" + record["token"][9:]  # a decoded text, not "token_id:N"


def _shuffle_keys(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffle_keys(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffle_keys(v, rng) for v in value]
    return value


def spell(document: Any, spelling: str, seed: int = 0) -> bytes:
    """Serialize one document in one of several legal JSON spellings."""
    if spelling == "compact":
        return samples.dumps(document)
    if spelling == "spaced":
        return json.dumps(document, separators=(", ", ": ")).encode()
    if spelling == "indented":
        return json.dumps(document, indent=2).encode()
    if spelling == "shuffled":
        return samples.dumps(_shuffle_keys(document, random.Random(seed)))
    if spelling == "escaped_slash":
        # '/' occurs only inside strings in JSON text, and "\/" is its legal escape.
        return samples.dumps(document).replace(b"/", b"\\/")
    if spelling == "decoys" and isinstance(document, dict):
        decoy = {"token_ids": [1, 2], "compact_logprobs": {"data": "!!", "offsets": [5]}, "routed_experts": 7}
        document = dict(document, kv_transfer_params=decoy)
        document["usage"] = dict(document.get("usage") or {}, **decoy)
        for choice in document.get("choices") or []:
            if isinstance(choice, dict):
                choice["extra"] = {"choices": [decoy], **decoy}
        return samples.dumps(document)
    return samples.dumps(document)


SPELLINGS = ["compact", "compact", "spaced", "indented", "shuffled", "escaped_slash", "decoys"]


def _mutations(choice: dict[str, Any]) -> list[str]:
    names = ["token_ids.extra", "token_ids.drop", "token_ids.missing", "token_ids.bool", "token_ids.float", "token_ids.huge"]
    if "compact_logprobs" in choice:
        names += [
            "compact.format", "compact.offsets_none", "compact.offsets_first", "compact.offsets_flat",
            "compact.offsets_bool", "compact.offsets_float", "compact.offsets_past", "compact.num_top_bool",
            "compact.num_top_neg", "compact.data_bad", "compact.data_none", "compact.data_short",
            "compact.value_positive", "compact.value_nan", "compact.sampled_sentinel", "compact.sampled_missing",
            "compact.repeat_disagree",
        ]
    if "completion_logprobs" in choice:
        names += ["packed.dtype", "packed.shape", "packed.count", "packed.nan", "packed.sentinel", "packed.base64_noncanonical", "token_ids.negative_packed"]
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and "sampled" in logprobs:
        names += ["sampled.count", "sampled.str", "sampled.sentinel", "sampled.bool"]
        if logprobs.get("content") is not None:
            names += ["sampled.disagree"]
    if isinstance(logprobs, dict) and isinstance(logprobs.get("top_k"), dict):
        names += ["top_k." + name for name in _TOP_K_MUTATIONS]
    if isinstance(logprobs, dict) and logprobs.get("content") is not None:
        names += [
            "native.entry_not_object", "native.token_mismatch", "native.token_id_bool", "native.token_id_str",
            "native.logprob_bool", "native.logprob_str", "native.sentinel", "native.count",
            "native.top_missing", "native.top_not_object", "native.top_dup", "native.top_positive",
            "native.top_str", "native.unicode_digits",
        ]
    if isinstance(choice.get("sampling_mask"), list):
        names += ["mask.count", "mask.empty_row", "mask.dup", "mask.sampled_missing", "mask.negative"]
    if isinstance(choice.get("sampling_mask"), dict):
        names += ["mask.count", "mask.dtype", "mask.shape", "mask.shape_bool", "mask.negative_csr"]
    if isinstance(choice.get("sampling_mask_logprobs"), list):
        names += ["mask_lp.short", "mask_lp.wide", "mask_lp.positive", "mask_lp.scale", "mask_lp.str"]
    if "kept_tokens" in choice:
        names += ["kept.count", "kept.dup", "kept.sampled_missing", "kept.negative"]
    if "routed_experts" in choice:
        names += ["routed.shape", "routed.dtype", "routed.start", "routed.base64", "routed.npy_header", "routed.rows"]
    if "payload" in choice:
        names += ["payload.rows", "payload.dtype", "payload.form", "payload.file", "payload.offset"]
    if isinstance(choice.get("weight_versions"), list):
        names += ["spans.gap", "spans.overlap", "spans.past_end", "spans.from_one", "spans.empty",
                  "spans.short", "spans.bool", "spans.float", "spans.version_int", "spans.not_object"]
    return names


def _apply(choice: dict[str, Any], name: str, draw) -> None:
    ids = choice["token_ids"]
    n = len(ids)
    pick = lambda size: draw(st.integers(0, size - 1))  # noqa: E731
    if name == "token_ids.extra":
        ids.append(3)
    elif name == "token_ids.drop" and n:
        ids.pop()
    elif name == "token_ids.missing":
        del choice["token_ids"]
    elif name == "token_ids.bool" and n:
        ids[pick(n)] = True
    elif name == "token_ids.float" and n:
        ids[pick(n)] = 1.5
    elif name == "token_ids.huge" and n:
        ids[pick(n)] = 2**32
    elif name == "token_ids.negative_packed" and n:
        ids[pick(n)] = -1
    elif name.startswith("compact."):
        _apply_compact(choice["compact_logprobs"], name[8:], n, draw)
    elif name.startswith("packed."):
        packed = choice["completion_logprobs"]
        values = np.frombuffer(samples.base64.b64decode(packed["data"]), "<f4").copy()
        if name == "packed.dtype":
            packed["dtype"] = draw(st.sampled_from(["float16", "int32", None, "<f4"]))
        elif name == "packed.shape":
            packed["shape"] = draw(st.sampled_from([[n + 1], [n, 1], None, [True] if n == 1 else "x"]))
        elif name == "packed.count":
            values = np.append(values, np.float32(-1))
            packed["shape"] = [len(values)]
        elif name in ("packed.nan", "packed.sentinel") and n:
            values[pick(n)] = np.nan if name == "packed.nan" else samples.SENTINEL
        elif name == "packed.base64_noncanonical":
            packed["data"] = packed["data"] + "\n"
            return
        packed["data"] = samples.b64(values.tobytes())
    elif name.startswith("native."):
        _apply_native(choice["logprobs"]["content"], name[7:], draw)
    elif name.startswith("mask."):
        _apply_mask(choice, name[5:], n, draw)
    elif name.startswith("mask_lp."):
        _apply_mask_logprobs(choice["sampling_mask_logprobs"], name[8:], draw)
    elif name.startswith("kept."):
        _apply_kept(choice["kept_tokens"], name[5:], choice["token_ids"], draw)
    elif name.startswith("sampled."):
        _apply_sampled(choice["logprobs"]["sampled"], name[8:], draw)
    elif name.startswith("top_k."):
        _apply_top_k(choice["logprobs"], name[6:], draw)
    elif name.startswith("spans."):
        _apply_spans(choice["weight_versions"], name[6:], n, draw)
    elif name.startswith("routed."):
        routed = choice["routed_experts"]
        if isinstance(routed, str):
            raw = bytearray(samples.base64.b64decode(routed))
            if name == "routed.npy_header":
                raw[draw(st.integers(0, 40))] ^= 0x20
            elif name == "routed.base64":
                choice["routed_experts"] = routed[:-1] + "*"
                return
            elif name == "routed.rows":  # a row more than the prompt and completion route
                array = np.load(io.BytesIO(bytes(raw)))
                raw = bytearray(samples.npy_bytes(np.concatenate([array, np.zeros((1, *array.shape[1:]), array.dtype)])))
            else:
                raw = raw[:-1]
            choice["routed_experts"] = samples.b64(bytes(raw))
        elif name == "routed.shape":
            routed["shape"] = draw(st.sampled_from([[1], [], [-1, 2, 2], [2**40, 2**40, 2**40], [True, 2, 2]]))
        elif name == "routed.dtype":
            routed["dtype"] = draw(st.sampled_from(["int64", None, "u1"]))
        elif name == "routed.start":
            routed["start"] = draw(st.sampled_from([-1, 1.5, "0", True]))
        elif name == "routed.base64":
            routed["data"] = "@" + routed["data"][1:]
        elif name == "routed.rows":  # a row more, or one fewer when there is one
            data = base64.b64decode(routed["data"])
            size = math.prod(routed["shape"][1:]) * np.dtype(routed["dtype"]).itemsize
            fewer = routed["shape"][0] > 0 and draw(st.booleans())
            routed["data"] = samples.b64(data[:-size] if fewer else data + bytes(size))
            routed["shape"][0] += -1 if fewer else 1
    elif name.startswith("payload."):
        _apply_payload(choice["payload"], name[8:], draw)


# prime-rl's PayloadSegment members, in the order of its array form.
SEGMENT_KEYS = ("field", "file", "offset", "pos", "rows", "dtype", "shape")


def add_payload(choice: dict[str, Any], index: int, prompt_len: int, draw) -> None:
    """prime-rl's by-handle segments for a choice without inline routing or mask: routing rows
    and their weights (when any position is routed), then the mask as CSR, in one file per
    choice, as arrays or objects. Parsed without ``payload_root``: no file is read."""
    n = len(choice["token_ids"])
    file = f"/shared/payload/choice-{index}.bin"
    segments: list[list[Any]] = []
    offset = 0
    if prompt_len + n >= 1:
        rows = prompt_len + n - 1
        segments += [["routed_experts", file, 0, 0, rows, "uint8", [2, 2]],
                     ["routed_expert_weights", file, rows * 4, 0, rows, "float32", [2, 2]]]
        offset = rows * 20
    segments.append(["sampling_mask", file, offset, prompt_len, n, "uint32", []])
    objects = draw(st.booleans())
    choice["payload"] = [dict(zip(SEGMENT_KEYS, s)) if objects else s for s in segments]


def _apply_payload(segments: list[Any], name: str, draw) -> None:
    segment = segments[draw(st.integers(0, len(segments) - 1))]
    if name == "form":  # a member missing
        del segment[-1 if isinstance(segment, list) else "shape"]
        return
    at = name if isinstance(segment, dict) else SEGMENT_KEYS.index(name)
    segment[at] = segment[at] + 1 if name == "rows" else {"dtype": "int64", "file": "", "offset": True}[name]


def _apply_mask_logprobs(rows: list[list[float]], name: str, draw) -> None:
    """Break prime-rl's mask logprob rows one way."""
    if name == "short" or not rows:
        rows.pop() if rows else rows.append([0.0])
        return
    t = draw(st.integers(0, len(rows) - 1))
    if name == "wide" or not rows[t]:
        rows[t].append(-1.0)
    elif name == "positive":
        rows[t][draw(st.integers(0, len(rows[t]) - 1))] = 0.5
    elif name == "scale":  # no longer renormalized (a marker row: no longer the marker throughout)
        rows[t] = [v - 1.0 for v in rows[t]]
    elif name == "str":
        rows[t][0] = str(rows[t][0])


def _apply_spans(spans: list[Any], name: str, n: int, draw) -> None:
    """Break the weight-version spans of an ``n``-token completion one way."""
    if name == "short" and spans:
        spans.pop()
        return
    if name == "empty" or not spans:
        spans.insert(draw(st.integers(0, len(spans))), {"version": "x", "start": n, "end": n})
        return
    at = draw(st.integers(0, len(spans) - 1))
    span = spans[at]
    if name == "gap":
        span["start"] += 1
    elif name == "overlap":
        span["start"] -= 1
    elif name == "past_end":
        spans[-1]["end"] = n + 1
    elif name == "from_one":
        spans[0]["start"] = 1
    elif name == "bool":
        span[draw(st.sampled_from(["start", "end"]))] = bool(span["start"])
    elif name == "float":
        span[draw(st.sampled_from(["start", "end"]))] = float(span["end"])
    elif name == "version_int":
        span["version"] = at
    elif name == "not_object":
        spans[at] = [span["version"], span["start"], span["end"]]


def _apply_compact(packed: dict[str, Any], name: str, n: int, draw) -> None:
    offsets = packed["offsets"]
    if name == "format":
        packed["format"] = "u32-f32-be-v1"
    elif name == "offsets_none":
        packed["offsets"] = None
    elif name == "offsets_first":
        offsets[0] = 1
    elif name == "offsets_flat" and n:
        offsets[-1] = offsets[-2]
    elif name == "offsets_bool" and n:
        offsets[1] = True if offsets[1] == 1 else False
    elif name == "offsets_float" and n:
        offsets[-1] = offsets[-1] + 0.5
    elif name == "offsets_past" and n:
        offsets[-1] += 1
    elif name == "num_top_bool":
        packed["num_top_logprobs"] = True
    elif name == "num_top_neg":
        packed["num_top_logprobs"] = -2
    elif name == "data_bad":
        packed["data"] = "?" + packed["data"][1:]
    elif name == "data_none":
        packed["data"] = None
    elif name == "data_short" and packed["data"]:
        packed["data"] = packed["data"][:-4]
    elif n and offsets[-1]:
        count = offsets[-1]
        raw = samples.base64.b64decode(packed["data"])
        ids = np.frombuffer(raw, "<u4", count=count).copy()
        vals = np.frombuffer(raw, "<f4", count=count, offset=4 * count).copy()
        row = draw(st.integers(0, n - 1))
        start, end = offsets[row], offsets[row + 1]
        at = draw(st.integers(start, end - 1))
        if name == "value_positive":
            vals[at] = 0.5
        elif name == "value_nan":
            vals[at] = np.nan
        elif name == "sampled_sentinel":
            segment = vals[start:end]
            segment[ids[start:end] == ids[start]] = samples.SENTINEL
        elif name == "sampled_missing":
            ids[start] = 4_000_000_000
        elif name == "repeat_disagree" and end - start > 1:
            ids[start + 1] = ids[start]
            vals[start + 1] = vals[start] - 1
        packed["data"] = samples.b64(ids.tobytes() + vals.tobytes())


def _apply_native(content: list[Any], name: str, draw) -> None:
    if name == "count":
        content.append(content[-1] if content else {"token": "token_id:1", "logprob": -1.0})
        return
    if not content:
        return
    t = draw(st.integers(0, len(content) - 1))
    entry = content[t]
    top = entry.get("top_logprobs") or []
    if name == "entry_not_object":
        content[t] = [entry]
    elif name == "token_mismatch":
        entry["token"] = "token_id:999999"
    elif name == "token_id_bool":
        entry["token_id"] = True
    elif name == "token_id_str":
        entry["token_id"] = entry["token"][9:]
    elif name == "logprob_bool":
        entry["logprob"] = False
    elif name == "logprob_str":
        entry["logprob"] = "-0.5"
    elif name == "sentinel":
        entry["logprob"] = samples.SENTINEL
    elif name == "unicode_digits":
        entry["token"] = "token_id:" + "".join(chr(0x660 + int(d)) for d in entry["token"][9:])
    elif name == "top_missing":
        entry["top_logprobs"] = draw(st.sampled_from([None, [], "x"]))
    elif top and name == "top_not_object":
        top[0] = 3
    elif top and name == "top_dup":
        top.append(dict(top[0]))
    elif top and name == "top_positive":
        top[-1]["logprob"] = 0.25
    elif top and name == "top_str":
        top[-1]["logprob"] = None


def _apply_mask(choice: dict[str, Any], name: str, n: int, draw) -> None:
    mask = choice["sampling_mask"]
    if isinstance(mask, list):
        if name == "count":
            mask.append([1])
        elif n and name == "empty_row":
            mask[draw(st.integers(0, n - 1))] = []
        elif n and name == "dup":
            row = mask[draw(st.integers(0, n - 1))]
            row.extend([row[0]] if row else [1, 1])
        elif n and name == "sampled_missing":
            t = draw(st.integers(0, n - 1))
            mask[t] = [i for i in mask[t] if i != choice["token_ids"][t]] or [choice["token_ids"][t] + 1]
        elif n and name == "negative":
            mask[draw(st.integers(0, n - 1))].append(-3)
        return
    if name == "count":
        counts = np.frombuffer(samples.base64.b64decode(mask["counts"]["data"]), "<i4")
        counts = np.append(counts, np.int32(1))
        mask["counts"] = {"data": samples.b64(counts.tobytes()), "shape": [len(counts)], "dtype": "int32"}
    elif name == "dtype":
        mask["ids"]["dtype"] = "int64"
    elif name == "shape":
        mask["ids"]["shape"] = [mask["ids"]["shape"][0] + 1]
    elif name == "shape_bool" and mask["counts"]["shape"] == [1]:
        mask["counts"]["shape"] = [True]
    elif name == "negative_csr":
        ids = np.frombuffer(samples.base64.b64decode(mask["ids"]["data"]), "<i4").copy()
        if len(ids):
            ids[draw(st.integers(0, len(ids) - 1))] = -5
            mask["ids"]["data"] = samples.b64(ids.tobytes())


def _apply_kept(kept: dict[str, str], name: str, token_ids: list[Any], draw) -> None:
    ids = np.frombuffer(samples.base64.b64decode(kept["ids"]), "<i4").copy()
    counts = np.frombuffer(samples.base64.b64decode(kept["counts"]), "<i4").copy()
    present = np.flatnonzero(counts)
    starts = np.concatenate([[0], np.cumsum(counts)])[:-1]
    if name == "count":
        counts = np.append(counts, np.int32(0))
    elif name == "negative" and len(counts):
        counts[draw(st.integers(0, len(counts) - 1))] = -1
    elif len(present) and name in ("dup", "sampled_missing"):
        t = int(present[draw(st.integers(0, len(present) - 1))])
        row = ids[starts[t] : starts[t] + counts[t]]
        if name == "dup" and counts[t] > 1:
            row[-1] = row[0]
        elif name == "sampled_missing" and isinstance(token_ids[t], int):
            row[row == token_ids[t]] = token_ids[t] + 1 if token_ids[t] + 1 < 2**31 else 0
    kept["ids"] = samples.b64(ids.astype("<i4").tobytes())
    kept["counts"] = samples.b64(counts.astype("<i4").tobytes())


def _apply_sampled(sampled: list[Any], name: str, draw) -> None:
    if name == "count":
        sampled.append(-1.0)
    elif sampled:
        t = draw(st.integers(0, len(sampled) - 1))
        sampled[t] = {"str": "-0.5", "sentinel": samples.SENTINEL, "bool": False,
                      "disagree": sampled[t] - 0.5}[name]


_TOP_K_MUTATIONS = ("not_object", "positions", "k_bool", "ids_short", "lps_base64", "nan", "positive",
                    "negative", "dup", "sentinel_sampled")


def _apply_top_k(logprobs: dict[str, Any], name: str, draw) -> None:
    """A malformed form of vLLM's packed top-k (the block as its encoder lays it out)."""
    block = logprobs["top_k"]
    ids = np.frombuffer(base64.b64decode(block["token_ids"]), "<i4").copy()
    lps = np.frombuffer(base64.b64decode(block["logprobs"]), "<f4").copy()
    if name == "not_object":
        logprobs["top_k"] = [block]
    elif name == "positions":
        block["num_positions"] += 1
    elif name == "k_bool":
        block["k"] = True
    elif name == "ids_short":
        block["token_ids"] = base64.b64encode(ids[:-1].tobytes()).decode() if len(ids) else "AAAAAA=="
    elif name == "lps_base64":
        block["logprobs"] = block["logprobs"] + "="
    elif len(ids):
        at = draw(st.integers(0, len(ids) - 1))
        width = block["k"]
        if name == "nan":
            lps[at] = np.nan
        elif name == "positive":
            lps[at] = 0.5
        elif name == "negative":
            ids[at] = -1
        elif name == "dup" and width > 1:
            row = at - at % width
            ids[row + 1] = ids[row]
        elif name == "sentinel_sampled":
            lps[at] = -np.inf
        block["token_ids"] = base64.b64encode(ids.tobytes()).decode()
        block["logprobs"] = base64.b64encode(lps.tobytes()).decode()


@st.composite
def cases(draw, *, mutate: bool | None = None, newer: bool = True) -> Case:
    """A response, possibly mutated, in some spelling, with the top_k it is parsed with
    (``newer``: as :func:`choices`)."""
    k = draw(st.sampled_from([None, None, 1, 2, 3, 5, 8, 20, 32]))
    count = draw(st.integers(1, 3))
    prompt_len = draw(st.integers(0, 6))
    chosen = [draw(choices(i, k, newer, prompt_len)) for i in range(count)]
    for i, choice in enumerate(chosen):
        inline = ("routed_experts", "sampling_mask", "kept_tokens")
        if newer and not any(key in choice for key in inline) and draw(st.integers(0, 3)) == 0:
            add_payload(choice, i, prompt_len, draw)
    document: Any = samples.response(chosen, prompt_tokens=prompt_len, seed=draw(st.integers(0, 99)))
    if newer and draw(st.integers(0, 5)) == 0:
        # vLLM's teacher scores: a (rows, K) float32 .npy, now and then with NaN or too many rows.
        rows = draw(st.integers(0, max(prompt_len - 1, 0) + draw(st.sampled_from([0, 0, 0, 1]))))
        matrix = np.full((rows, draw(st.integers(0, 3))), draw(st.sampled_from([-0.5, -np.inf, np.nan])), np.float32)
        buffer = io.BytesIO()
        np.save(buffer, matrix)
        document["prompt_token_id_logprobs"] = base64.b64encode(buffer.getvalue()).decode()
    if newer:
        _as_text(document, draw(st.sampled_from(OUTPUT_MODES)))
    mutation = None
    if mutate is None:
        mutate = draw(st.booleans())
    if mutate:
        target = draw(st.integers(0, count - 1))
        options = _mutations(chosen[target]) + ["prompt.negative", "choices.empty", "choices.not_list", "document.not_object", "choice.not_object", "bytes.truncate", "bytes.flip"]
        mutation = draw(st.sampled_from(options))
        if mutation == "prompt.negative":
            document["prompt_token_ids"] = [-1]
        elif mutation == "choices.empty":
            document["choices"] = []
        elif mutation == "choices.not_list":
            document["choices"] = {"0": chosen[0]}
        elif mutation == "document.not_object":
            document = [document]
        elif mutation == "choice.not_object":
            document["choices"][target] = [chosen[target]]
        elif not mutation.startswith("bytes."):
            _apply(chosen[target], mutation, draw)
        if mutation.startswith("mask.") and k is None:
            mutation = "mask.without_head"
        if target > 0 and mutation not in STRICTER_THAN_RENDERERS | READ_OTHERWISE_THAN_RENDERERS:
            mutation = "later_choice"
    spelling = draw(st.sampled_from(SPELLINGS))
    raw = spell(document, spelling, seed=draw(st.integers(0, 99)))
    if mutation == "bytes.truncate":
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    elif mutation == "bytes.flip":
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1 :]
    # Forms renderers does not read: the reference differs by design (the drop-in does not).
    notes = [name for name in ("kept_tokens", "logprobs.sampled") if any(_carries(c, name) for c in chosen)]
    if isinstance(document, dict) and "prompt_token_id_logprobs" in document:
        notes.append("prompt_token_id_logprobs")
    # routing draws ids below 8 or 300: bounds under, at and above them
    num_experts = draw(st.sampled_from([None, None, None, 8, 256, 300]))
    return Case(raw, k, mutation, spelling, notes, num_experts)


def _carries(choice: Any, name: str) -> bool:
    if not isinstance(choice, dict):
        return False
    if name == "kept_tokens":
        return "kept_tokens" in choice
    return isinstance(choice.get("logprobs"), dict) and "sampled" in choice["logprobs"]
