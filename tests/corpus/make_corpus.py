"""Regenerate the adversarial corpus: ``python tests/corpus/make_corpus.py``.

Each case is a response file ``NAME.json`` (bytes, not necessarily valid JSON) and its
expected outcome in ``expected.json``: ``"ok"``, or the start of the error's reason. A case
is a generate response unless its name starts with ``chat_`` (a ``/v1/chat/completions``
response) or ``completions_`` (a ``/v1/completions`` response); one whose name ends with ``_with_head`` is parsed with ``top_k=3``, one ending
with ``_with_experts`` with ``num_experts=64``.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent


def packed(values, dtype="<f4"):
    return base64.b64encode(np.asarray(values, dtype).tobytes()).decode()


def good_choice(**extra):
    choice = {"index": 0, "token_ids": [7, 8], "completion_logprobs": {"data": packed([-0.5, -1.5]), "shape": [2], "dtype": "float32"}}
    choice.update(extra)
    return choice


def doc(*choices, **top):
    return {"request_id": "r", "choices": list(choices) or [good_choice()], **top}


def dump(d) -> bytes:
    return json.dumps(d, separators=(",", ":")).encode()


def top_k_cases() -> dict[str, tuple[bytes, str]]:
    """vLLM's packed top-k (logprobs.top_k) over two tokens, k = 6, -inf kept."""
    ids = np.array([[5, 9, 1, 2, 3, 4], [6, 4, 8, 10, 11, 12]])
    lps = np.log(np.array([[0.5, 0.25, 0.125, 0, 0, 0], [0.5, 0.2, 0, 0, 0, 0]]), where=[[1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]],
                 out=np.array([[0, 0, 0, -3, -4, -np.inf], [0, 0, -2, -3, -4, -5]], dtype=np.float64))
    sampled = [float(np.float32(np.log(0.5)))] * 2

    def case(top_ids=ids, values=lps, positions=2, raw_ids=None):
        block = {"num_positions": positions, "k": 6, "token_ids": raw_ids or packed(top_ids, "<i4"), "logprobs": packed(values)}
        choice = {"index": 0, "token_ids": [5, 6], "finish_reason": "stop",
                  "logprobs": {"content": None, "sampled": sampled, "top_k": block}}
        return dump({"choices": [choice]})

    nan = lps.copy()
    nan[1, 1] = np.nan
    dup = ids.copy()
    dup[1, 2] = 4
    return {
        "top_k_ok_with_head": (case(), "ok"),
        "top_k_nan_with_head": (case(values=nan), "Top logprob must be a number at most 1e-6 or -inf"),
        "top_k_duplicate_with_head": (case(top_ids=dup), "Duplicate top logprob token id"),
        "top_k_rows_short": (case(positions=3), "Packed top-k num_positions must be the completion token count"),
        "top_k_bytes_short": (case(raw_ids=packed(np.zeros(11), "<i4")), "Packed top-k token_ids must be base64 of 12 int32"),
    }


def mask_logprobs_cases() -> dict[str, tuple[bytes, str]]:
    """prime-rl's sampling_mask_logprobs beside a list-form mask of the two tokens of good_choice."""
    half = float(np.float32(np.log(0.5)))

    def case(rows, mask=([7, 3], [])):
        return dump(doc(good_choice(sampling_mask=list(mask), sampling_mask_logprobs=rows)))

    return {
        "mask_logprobs_ok": (case([[half, half], []]), "ok"),
        "mask_logprobs_marker": (case([[-9999.0, -9999.0], []]), "ok"),
        "mask_logprobs_row_short": (case([[half], []]), "sampling_mask_logprobs row must be a list of 2 logprobs"),
        "mask_logprobs_on_absent_row": (case([[half, half], [0.0]]), "sampling_mask_logprobs row must be a list of 0 logprobs"),
        "mask_logprobs_unnormalized": (case([[-0.1, -0.1], []]), "support logprobs must normalize over their sampling mask row"),
        "mask_logprobs_without_mask": (dump(doc(good_choice(sampling_mask_logprobs=[[0.0], [0.0]]))),
                                       "sampling_mask_logprobs needs the sampling_mask"),
        "mask_logprobs_deep": (case([[half, half], "deep"]).replace(b'"deep"', b"[" * 100 + b"]" * 100),
                               "sampling_mask_logprobs row must be a list of 0 logprobs"),
    }


def payload_and_teacher_cases() -> dict[str, tuple[bytes, str]]:
    """prime-rl's by-handle segments (array form, checked without reading the file: no
    payload_root), vLLM's teacher scores and the packed mask's zero counts, over the two tokens
    of good_choice after a prompt of three."""
    file = "/shared/payload/0b1c.bin"

    def seg(field, offset, pos, rows, dtype, shape):
        return [field, file, offset, pos, rows, dtype, shape]

    ok = [seg("routed_experts", 0, 0, 4, "uint8", [2, 2]), seg("routed_expert_weights", 16, 0, 4, "float32", [2, 2]),
          seg("sampling_mask", 80, 3, 2, "uint32", [])]

    def segments(*segs):
        return dump(doc(good_choice(routed_experts=None, sampling_mask=None, payload=list(segs)), prompt_token_ids=[1, 2, 3]))

    def teacher(matrix):
        return dump(doc(prompt_token_ids=[1, 2, 3], prompt_token_id_logprobs=npy(matrix)))

    def counts(ids, rows):
        return dump(doc(good_choice(sampling_mask={"ids": {"data": packed(ids, "<i4"), "shape": [len(ids)], "dtype": "int32"},
                                                   "counts": {"data": packed(rows, "<i4"), "shape": [len(rows)], "dtype": "int32"}})))

    return {
        "payload_ok": (segments(*ok), "ok"),
        "payload_rows_huge": (segments(seg("routed_experts", 0, 0, 10**9, "uint8", [2, 2]), *ok[1:]),
                              "routed_experts payload rows must end at 4, not 1000000000"),
        "payload_dtype_int64": (segments(seg("routed_experts", 0, 0, 4, "int64", [2, 2]), *ok[1:]),
                                "Unsupported routed_experts payload dtype"),
        "payload_member_missing": (segments(ok[0][:-1], *ok[1:]), "payload segment must be an array [field, file"),
        "payload_overlap": (segments(ok[0], seg("routed_expert_weights", 8, 0, 4, "float32", [2, 2]), ok[2]),
                            "payload segment bytes [8, 72) of /shared/payload/0b1c.bin overlap"),
        "teacher_ok": (teacher(np.array([[-0.5, -np.inf], [-1.0, -2.0]], dtype=np.float32)), "ok"),
        "teacher_all_nan": (teacher(np.full((2, 3), np.nan, dtype=np.float32)), "prompt_token_id_logprobs holds NaN"),
        "teacher_rows_extra": (teacher(np.full((3, 3), -1.0, dtype=np.float32)),
                               "prompt_token_id_logprobs has 3 rows for a prompt of 3 tokens: at most 2"),
        "teacher_float64": (teacher(np.full((2, 2), -1.0)), "prompt_token_id_logprobs .npy header is invalid"),
        "mask_zero_counts": (counts([7], [1, 0]), "ok"),
        "mask_negative_count": (counts([7, 9], [3, -1]), "Invalid packed sampling mask"),
    }


def dynamo_cases() -> dict[str, tuple[bytes, str]]:
    """NVIDIA Dynamo's engine data beside a chat choice of ids [7, 8] after a prompt [1, 2, 3]."""

    data = {"completion_token_ids": [7, 8], "completion_logprobs": [-0.5, -1.5], "prompt_token_ids": [1, 2, 3],
            "finished": True}

    def engine(**change):
        return chat(None, nvext={"engine_data": {**data, **change}})

    rows = np.arange(4 * 2 * 2, dtype=np.uint8).reshape(4, 2, 2)  # 3 + 2 - 1 routed positions

    def routed(array, start=0, dtype="uint8"):
        return {"data": base64.b64encode(array.tobytes()).decode(), "dtype": dtype, "shape": list(array.shape),
                "start": start}

    two = json.loads(engine())
    two["choices"].append({**two["choices"][0], "index": 1})
    two_choices = dump(two)

    def text_records(values, engine_data):
        """The post-processed choice's records of text (no ids), none on the choice's token_ids."""
        doc = json.loads(chat(None, nvext={"engine_data": engine_data}))
        choice = doc["choices"][0]
        del choice["token_ids"]
        choice["logprobs"]["content"] = [{"token": "x", "logprob": v} for v in values]
        return dump(doc)

    sglang_rows = np.arange(4 * 2 * 2, dtype="<i4").reshape(4, 2, 2) % 8

    def bare(array):
        return base64.b64encode(np.ascontiguousarray(array, "<i4").tobytes()).decode()

    def sglang(routing, copy=None):
        """An SGLang worker's engine data (its routing alone) and the frontend's copy of it."""
        return chat(None, nvext={"routed_experts": routing if copy is None else copy,
                                 "engine_data": {"routed_experts": routing}})

    return {
        "chat_dynamo_ok": (engine(), "ok"),
        "chat_dynamo_trailing_eos": (engine(completion_token_ids=[7, 8, 2], completion_logprobs=[-0.5, -1.5, -0.1]),
                                     "the engine's completion ids and the choice's differ in length"),
        "chat_dynamo_clamp": (engine(completion_logprobs=[-0.5, -1e30]), "logprob is -1e+30, Dynamo's stand-in"),
        "chat_dynamo_prompt_differs": (engine(prompt_token_ids=[1, 2, 4]),
                                       "the engine's prompt ids (nvext.engine_data.prompt_token_ids)"),
        "chat_dynamo_not_object": (chat(None, nvext={"engine_data": [7, 8]}), "nvext.engine_data must be an object"),
        "chat_dynamo_id_differs": (engine(completion_token_ids=[7, 9]),
                                   "the engine's completion ids and the choice's differ at token 1"),
        "chat_dynamo_logprobs_short": (engine(completion_logprobs=[-0.5]),
                                       "nvext.engine_data has 2 completion_token_ids but 1 completion_logprobs"),
        "chat_dynamo_id_negative": (engine(completion_token_ids=[7, -1]),
                                    "nvext.engine_data.completion_token_ids must hold token ids"),
        "chat_dynamo_unfinished": (engine(finished=False), "nvext.engine_data.finished is false"),
        "chat_dynamo_two_choices": (two_choices, "nvext.engine_data is one per response"),
        "chat_dynamo_routing": (engine(routed_experts=routed(rows)), "ok"),
        "chat_dynamo_routing_row_short": (engine(routed_experts=routed(rows[:-1])),
                                          "nvext.engine_data.routed_experts has 3 rows, not 4"),
        "chat_dynamo_routing_from_start": (engine(routed_experts=routed(rows[2:], start=2)), "ok"),
        "chat_dynamo_routing_torch_dtype": (engine(routed_experts=routed(rows, dtype="torch.uint8")),
                                            "Unsupported nvext.engine_data.routed_experts dtype"),
        "chat_dynamo_routing_bytes_short": (engine(routed_experts={**routed(rows), "shape": [5, 2, 2]}),
                                            "nvext.engine_data.routed_experts shape [5, 2, 2] x 1 bytes does not match"),
        "chat_dynamo_routing_twice": (chat(npy(rows), nvext={"engine_data": {**data, "routed_experts": routed(rows)}}),
                                      "routed_experts is sent on the choice and in nvext: one form only"),
        # nvext.completion_token_ids: the engine's ids on their own, or beside the engine data
        "chat_dynamo_nvext_ids_ok": (chat(None, nvext={"completion_token_ids": [7, 8]}), "ok"),
        "chat_dynamo_nvext_ids_eos": (chat(None, nvext={"completion_token_ids": [7, 8, 2]}),
                                      "the engine's completion ids and the choice's differ in length"),
        "chat_dynamo_nvext_ids_float": (chat(None, nvext={"completion_token_ids": [7, 8.5]}),
                                        "nvext.completion_token_ids must hold token ids"),
        "chat_dynamo_nvext_ids_disagree": (chat(None, nvext={"engine_data": data, "completion_token_ids": [7, 9]}),
                                           "the engine's completion ids and the ones at nvext's top differ at token 1"),
        # the engine's logprobs are the evidence: the post-processed choice's neither counted nor compared
        "chat_dynamo_choice_logprobs_differ": (text_records([-9.1, None], data), "ok"),
        "chat_dynamo_choice_logprobs_short": (text_records([-0.5], data), "ok"),
        "chat_dynamo_text_records_with_head": (text_records([-0.5, -1.5], data),
                                               "Missing requested top logprobs: the sampled logprobs are the engine's"),
        # an SGLang worker's routing (bare base64 int32), and the frontend's copy at nvext's top
        "chat_dynamo_sglang_routing": (sglang(bare(sglang_rows)), "ok"),
        "chat_dynamo_sglang_routing_odd_bytes": (sglang(base64.b64encode(b"\x01" * 6).decode()),
                                                 "nvext.engine_data.routed_experts holds 6 bytes, not whole int32"),
        "chat_dynamo_sglang_routing_uneven": (sglang(bare(sglang_rows.reshape(-1)[:-1])),
                                              "nvext.engine_data.routed_experts holds 15 int32 values, which 4 rows"),
        "chat_dynamo_sglang_routing_with_experts": (sglang(bare(sglang_rows * 10)),
                                                    "nvext.engine_data.routed_experts holds expert id 70"),
        "chat_dynamo_nvext_routing_alone": (chat(None, nvext={"routed_experts": routed(rows)}), "ok"),
        "chat_dynamo_npy_routing": (engine(routed_experts=npy(rows)), "ok"),
        "chat_dynamo_npy_routing_row_short": (engine(routed_experts=npy(rows[:-1])),
                                              "nvext.engine_data.routed_experts has 3 rows, not 4"),
        "chat_dynamo_nvext_routing_differs": (sglang(bare(sglang_rows), copy=bare(sglang_rows[::-1])),
                                              "nvext.routed_experts differs from nvext.engine_data.routed_experts"),
    }


def cases() -> dict[str, tuple[bytes, str]]:
    ok = dump(doc())
    out: dict[str, tuple[bytes, str]] = {"valid": (ok, "ok")}
    out["nesting_100k"] = (b"[" * 100_000 + b"]" * 100_000, "invalid JSON")
    out["nesting_100k_in_payload"] = (ok[:-1] + b',"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "invalid JSON")
    out["id_beyond_2_64"] = (ok.replace(b"[7,8]", b"[18446744073709551616,8]"), "token_ids must hold token ids")
    out["id_beyond_2_32"] = (ok.replace(b"[7,8]", b"[4294967296,8]"), "token_ids must hold token ids")
    out["id_negative_zero"] = (ok.replace(b"[7,8]", b"[-0,8]"), "ok")
    out["id_float"] = (ok.replace(b"[7,8]", b"[7.0,8]"), "token_ids must hold token ids")
    out["number_1e400"] = (ok.replace(b'"request_id":"r"', b'"request_id":1e400'), "invalid JSON")
    out["negative_zero_payload"] = (ok.replace(b'"request_id":"r"', b'"request_id":-0.0'), "ok")
    out["nan_literal"] = (ok.replace(b'"request_id":"r"', b'"request_id":NaN'), "invalid JSON")
    out["infinity_literal"] = (ok.replace(b'"request_id":"r"', b'"request_id":-Infinity'), "invalid JSON")
    out["utf8_bom"] = (b"\xef\xbb\xbf" + ok, "invalid JSON")
    out["invalid_utf8"] = (ok.replace(b'"r"', b'"\xff\xfe"'), "invalid JSON")
    out["lone_surrogate"] = (ok.replace(b'"r"', b'"\\ud800"'), "invalid JSON")
    out["nul_in_key"] = (ok.replace(b'"request_id"', b'"request\\u0000id"'), "ok")
    out["duplicate_keys_last_wins"] = (ok.replace(b'"token_ids":[7,8]', b'"token_ids":[1],"token_ids":[7,8]'), "ok")
    out["duplicate_keys_last_bad"] = (ok.replace(b'"token_ids":[7,8]', b'"token_ids":[7,8],"token_ids":[1]'), "Engine response choice.completion_logprobs")
    out["escaped_slash_base64"] = (dump(doc(good_choice(completion_logprobs={"data": packed([-0.5, -1.5]).replace("/", "\\/") if "/" in packed([-0.5, -1.5]) else packed([-0.5, -1.5]), "shape": [2], "dtype": "float32"}))).replace(b"\\\\/", b"\\/"), "ok")
    # "\u0041" is "A": four of them add three decoded bytes, so the float32 buffer is 11 bytes.
    out["unicode_escaped_base64"] = (ok.replace(b'"data":"', b'"data":"\\u0041\\u0041\\u0041\\u0041'), "Invalid packed logprob buffer length")
    decoy = {"token_ids": [1], "compact_logprobs": {"data": "!!", "offsets": [9]}, "routed_experts": "??"}
    out["decoys_elsewhere"] = (dump(doc(good_choice(extra=decoy), usage=decoy, kv_transfer_params=decoy)), "ok")
    out["shape_overflow"] = (dump(doc(good_choice(routed_experts={"data": "AAAA", "shape": [2**62, 2**62, 2**62], "dtype": "uint8"}))), "routed_experts shape")
    out["shape_terabytes"] = (dump(doc(good_choice(routed_experts={"data": "AAAA", "shape": [10**6, 10**6, 1000], "dtype": "uint16"}))), "routed_experts shape")
    out["npy_claims_terabytes"] = (dump(doc(good_choice(routed_experts=base64.b64encode(b"\x93NUMPY\x01\x00" + (118).to_bytes(2, "little") + b"{'descr': '|u1', 'fortran_order': False, 'shape': (1000000000000,), }".ljust(117) + b"\n" + b"\x01").decode()))), "routed_experts shape")
    compact = {"data": packed([7], "<u4")[:-2] + "==", "format": "u32-f32-le-v1", "offsets": [0, 10**12], "num_top_logprobs": 0}
    out["offsets_past_buffer"] = (dump(doc({"token_ids": [7], "compact_logprobs": compact})), "Invalid compact logprob")
    good_compact = {"data": base64.b64encode(np.asarray([7], "<u4").tobytes() + np.asarray([-0.5], "<f4").tobytes()).decode(), "format": "u32-f32-le-v1", "offsets": [0, 1], "num_top_logprobs": 2**62}
    out["huge_num_top"] = (dump(doc({"token_ids": [7], "compact_logprobs": good_compact})), "ok")
    out["huge_num_top_with_head"] = (dump(doc({"token_ids": [7], "compact_logprobs": good_compact})), "Engine returned fewer top logprobs")
    out["num_top_beyond_2_64"] = (dump(doc({"token_ids": [7], "compact_logprobs": dict(good_compact, num_top_logprobs=10**30)})), "Invalid compact logprob candidate count")
    out.update(routing_cases())
    out.update(top_k_cases())
    out.update(mask_logprobs_cases())
    out.update(payload_and_teacher_cases())
    out.update(dynamo_cases())
    out.update(generate_rows_cases())
    out.update(openai_form_cases())
    # Weight-version spans (vLLM's choices[].weight_versions) over the two tokens of good_choice.
    def spans(*triples):
        return dump(doc(good_choice(weight_versions=[{"version": v, "start": a, "end": b} for v, a, b in triples])))

    out["weight_versions_ok"] = (spans(("s1", 0, 1), ("s2", 1, 2)), "ok")
    out["weight_versions_gap"] = (spans(("s1", 0, 1), ("s2", 2, 2)), "weight_versions must cover the output tokens")
    out["weight_versions_overlap"] = (spans(("s1", 0, 2), ("s2", 1, 2)), "weight_versions must cover the output tokens")
    out["weight_versions_past_end"] = (spans(("s1", 0, 2**63 - 1)), "weight_versions span 0 [0, 9223372036854775807) ends past")
    out["weight_versions_bool"] = (spans(("s1", False, True), ("s2", True, 2)), "weight_versions span 0: start must be an int")
    out["weight_versions_float"] = (spans(("s1", 0, 2.0)), "weight_versions span 0: end must be an int")
    out["weight_versions_deep_version"] = (spans(("s1", 0, 2)).replace(b'"s1"', b"[" * 100 + b"]" * 100),
                                           "weight_versions span 0: version must be a string")
    # vLLM's output_mode "text": records of decoded text, read by position; a head needs ids.
    text = {"content": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105],
                         "top_logprobs": [{"token": t, "logprob": -0.5 - i} for i, t in enumerate(["Hi", "Yo", "A", "B", "C"])]},
                        {"token": "!", "logprob": -1.5, "bytes": [33],
                         "top_logprobs": [{"token": t, "logprob": -1.5 - i} for i, t in enumerate(["!", "?", ".", ",", ";"])]}]}
    out["output_mode_text"] = (dump(doc({"token_ids": [7, 8], "text": "Hi!", "logprobs": text}, output_mode="text")), "ok")
    out["output_mode_text_with_head"] = (out["output_mode_text"][0], "Top logprob must identify a nonnegative token id: the response is output_mode")
    out["text_records_unsaid"] = (dump(doc({"token_ids": [7, 8], "logprobs": text})),
                                  "Engine response choice.logprobs.content[0].token must be 'token_id:7'. The record carries decoded text")
    out["empty_document"] = (b"", "invalid JSON")
    out["whitespace_only"] = (b" \n\t ", "invalid JSON")
    out["top_level_array"] = (b"[]", "response must be a JSON object")
    out["trailing_garbage"] = (ok + b"x", "invalid JSON")
    return out


def npy(array: np.ndarray) -> str:
    """A routing array as vLLM's OpenAI-compatible server sends it: a whole .npy file, base64."""
    buffer = io.BytesIO()
    np.save(buffer, array)
    return base64.b64encode(buffer.getvalue()).decode()


def chat(routed, **top) -> bytes:
    """A vLLM chat completion of 3 prompt and 2 completion tokens with ``routed_experts``."""
    records = [{"token": "token_id:7", "logprob": -0.5}, {"token": "token_id:8", "logprob": -1.5}]
    choice = {"index": 0, "message": {"role": "assistant", "content": "x"}, "logprobs": {"content": records},
              "finish_reason": "stop", "token_ids": [7, 8], "routed_experts": routed}
    return dump({"id": "r", "object": "chat.completion", "choices": [choice], "prompt_token_ids": [1, 2, 3],
                 "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}, **top})


def routing_cases() -> dict[str, tuple[bytes, str]]:
    """vLLM's routing replay on the OpenAI-compatible endpoints, malformed as a server could."""
    rows = np.arange(4 * 2 * 2, dtype=np.uint8).reshape(4, 2, 2)  # 3 + 2 - 1 rows, 2 layers, top-2
    negative = rows.astype(np.int32)
    negative[2, 1, 0] = -1
    packed = np.concatenate([rows.astype(np.int32), np.full(rows.shape, 0.5, np.float32).view(np.int32)], axis=2)
    huge = b"\x93NUMPY\x01\x00" + (118).to_bytes(2, "little") + b"{'descr': '|u1', 'fortran_order': False, 'shape': (10000000000, 2, 2), }".ljust(117) + b"\n\x01"
    return {
        "chat_routing": (chat(npy(rows)), "ok"),
        "chat_routing_row_short": (chat(npy(rows[:-1])), "routed_experts has 3 rows, not 4"),
        "chat_routing_row_extra": (chat(npy(np.concatenate([rows, rows[:1]]))), "routed_experts has 5 rows, not 4"),
        "chat_routing_rank_2": (chat(npy(rows[:, 0])), "routed_experts shape must be"),
        "chat_routing_float": (chat(npy(rows.astype(np.float32))), "routed_experts .npy header is invalid"),
        "chat_routing_negative": (chat(npy(negative)), "routed_experts holds a negative expert id"),
        "chat_routing_npy_claims_terabytes": (chat(base64.b64encode(huge).decode()), "routed_experts shape"),
        "chat_routing_packed_weights_with_experts": (chat(npy(packed)), "routed_experts holds expert id 1056964608"),
        "chat_routing_split": (chat(rows[3:].tolist(), prompt_routed_experts=rows[:3].tolist()), "ok"),
        "chat_routing_split_prompt_short": (chat(rows[3:].tolist(), prompt_routed_experts=rows[:2].tolist()),
                                            "prompt_routed_experts has 2 rows, not 3"),
        "chat_routing_split_ragged": (chat([[[1, 2]], [[3]]], prompt_routed_experts=rows[:3].tolist()),
                                      "routed_experts must be a base64 .npy string or [rows, layers, topk] lists"),
    }


def generate_rows_cases() -> dict[str, tuple[bytes, str]]:
    """The generate endpoint's routing rows counted from the prompt's length (prime-rl's
    object form, vLLM's .npy), and prime-rl's -1-padded mask segments: a prompt of 19 tokens,
    a completion of 33 (as prime-rl's handler sends it: usage, no prompt ids)."""
    prompt, n = 19, 33
    ids = [(7 * t) % 50 for t in range(n)]
    rows = ((np.arange((prompt + n - 1) * 2 * 2) % 8).astype(np.uint8)).reshape(prompt + n - 1, 2, 2)

    def routed(array, start=0):
        return {"data": base64.b64encode(array.tobytes()).decode(), "shape": list(array.shape), "start": start,
                "dtype": str(array.dtype)}

    def generate(routing, **top):
        choice = {"index": 0, "logprobs": None, "finish_reason": "stop", "token_ids": ids,
                  "completion_logprobs": {"data": packed([-0.5] * n), "shape": [n], "dtype": "float32"},
                  "routed_experts": routing}
        usage = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
        return dump({"request_id": "generate-tokens-r", "choices": [choice], "usage": usage, **top})

    file = "/shared/payload/0b1c.bin"

    def mask(dtype, shape):
        segment = ["sampling_mask", file, 0, 3, 2, dtype, shape]
        return dump(doc(good_choice(routed_experts=None, sampling_mask=None, payload=[segment]), prompt_token_ids=[1, 2, 3]))

    return {
        "routing_rows_ok": (generate(routed(rows)), "ok"),
        "routing_rows_from_start_ok": (generate(routed(rows[5:], start=5)), "ok"),
        "routing_rows_npy_ok": (generate(npy(rows)), "ok"),
        "routing_rows_few": (generate(routed(rows[:3])),
                             "routed_experts has 3 rows, not 51: one per token of the prompt (19) and of the completion (33)"),
        "routing_rows_extra": (generate(routed(np.concatenate([rows, rows[:1]]))), "routed_experts has 52 rows, not 51"),
        "routing_rows_start_unshifted": (generate(routed(rows, start=1)), "routed_experts has 51 rows, not 50"),
        "routing_rows_npy_short": (generate(npy(rows[1:])), "routed_experts has 50 rows, not 51"),
        "routing_rows_prompt_ids_disagree": (generate(routed(rows), prompt_token_ids=list(range(prompt + 1))),
                                             "routed_experts has 51 rows, not 52"),
        "payload_mask_padded_ok": (mask("int32", [4]), "ok"),
        "payload_mask_padded_no_width_ok": (mask("int32", [0]), "ok"),
        "payload_mask_int32_one_wide": (mask("int32", [1]), "sampling_mask payload rows of int32 shape [1] are ambiguous"),
        "payload_mask_padded_width_negative": (mask("int32", [-3]), "sampling_mask payload rows of int32 ids padded"),
def openai_form_cases() -> dict[str, tuple[bytes, str]]:
    """vLLM's packed top-k on /v1/completions, SGLang's sglext.routed_experts, llama.cpp's records."""
    ids = np.array([[5, 9, 1, 2, 3], [4, 6, 8, 10, 11]], "<i4")
    lps = np.log(np.array([[0.5, 0.25, 0.125, 0.0625, 1.0], [0.4, 0.3, 0.2, 0.05, 0.05]]))
    lps[0, 4] = -np.inf  # a candidate the sampler filtered out, sent unclamped

    def completions(block_ids=ids, values=lps, positions=2):
        block = {"num_positions": positions, "k": 5, "token_ids": packed(block_ids, "<i4"), "logprobs": packed(values)}
        logprobs = {"text_offset": [0, 10], "token_logprobs": [float(np.float32(np.log(0.5))), float(np.float32(np.log(0.3)))],
                    "tokens": ["token_id:5", "token_id:6"], "top_logprobs": [], "top_k": block}
        choice = {"index": 0, "text": "ab", "logprobs": logprobs, "finish_reason": "length", "stop_reason": None,
                  "token_ids": [5, 6], "prompt_logprobs": None, "prompt_token_ids": [1, 2]}
        return dump({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [choice],
                     "usage": {"prompt_tokens": 2, "total_tokens": 4, "completion_tokens": 2}})

    nan = lps.copy()
    nan[1, 0] = np.nan

    def sglang(routing):
        choice = {"index": 0, "message": {"role": "assistant", "content": "x"},
                  "logprobs": {"content": [{"token": "a", "bytes": [97], "logprob": -0.5, "top_logprobs": []},
                                           {"token": "b", "bytes": [98], "logprob": -1.5, "top_logprobs": []}]},
                  "finish_reason": "stop", "matched_stop": 2, "token_ids": [7, 8]}
        return dump({"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice],
                     "usage": {"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2}, "metadata": {"weight_version": "default"},
                     "sglext": {"routed_experts": routing}})

    def sglang_meta(routing):
        """SGLang's chat with return_meta_info: the routing in the choice's meta_info, none in sglext."""
        body = json.loads(sglang(None))
        del body["sglext"]
        body["choices"][0]["meta_info"] = {"id": "c", "finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": 3,
                                           "completion_tokens": 2, "routed_experts": routing}
        return dump(body)

    def llama(key="logprob", sampled=-0.6931471824645996):
        top = "top_probs" if key == "prob" else "top_logprobs"
        records = [{"bytes": [104], "id": 9707, key: sampled, "token": "h",
                    top: [{"bytes": [104], "id": 9707, key: sampled, "token": "h"},
                          {"bytes": [105], "id": 13, key: -1.3862943649291992, "token": "i"}]}]
        return json.dumps({"choices": [{"finish_reason": "stop", "index": 0, "logprobs": {"content": records},
                                        "message": {"content": "h", "role": "assistant"}}],
                           "created": 1, "id": "chatcmpl-1", "model": "m", "object": "chat.completion",
                           "usage": {"completion_tokens": 1, "prompt_tokens": 3, "total_tokens": 4}},
                          sort_keys=True, separators=(",", ":")).encode()

    routing = packed(np.arange(4 * 6) % 8, "<i4")  # 3 + 2 - 1 rows of 6
    return {
        "completions_top_k_ok_with_head": (completions(), "ok"),
        "completions_top_k_rows_short": (completions(positions=3), "Packed top-k num_positions must be the completion token count"),
        "completions_top_k_nan": (completions(values=nan), "Top logprob must be a number at most 1e-6 or -inf"),
        "chat_sglext_routing": (sglang(routing), "ok"),
        "chat_sglext_routing_6_bytes": (sglang("AQIDBAUG"), "sglext.routed_experts holds 6 bytes, not whole int32 values"),
        "chat_sglext_routing_row_short": (sglang(packed(np.arange(3 * 6) % 8, "<i4")), "sglext.routed_experts holds 18 int32 values, which 4 rows"),
        "chat_sglang_meta_info_routing": (sglang_meta(routing), "ok"),
        "chat_sglang_meta_info_routing_row_extra": (sglang_meta(packed(np.arange(5 * 6) % 8, "<i4")),
                                                    "meta_info.routed_experts holds 30 int32 values, which 4 rows"),
        "chat_llama_records": (llama(), "ok"),
        "chat_llama_post_sampling_probs": (llama("prob", 0.5), "logprobs.content records carry probabilities"),
        "chat_llama_log_zero": (llama(sampled=-3.4028234663852886e38), "logprob is -3.40282e+38, the lowest float"),
    }


def main() -> None:
    expected = {}
    for name, (raw, outcome) in cases().items():
        (HERE / f"{name}.json").write_bytes(raw)
        expected[name] = outcome
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
