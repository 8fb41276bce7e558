"""A representative workload for valgrind memcheck: every sample, the adversarial corpus, the
writers, the OpenAI-compatible and SGLang readers, and the batch path (parse_many on two
threads, collate), on the scalar and AVX2 paths (valgrind cannot run AVX-512)."""

import json
from pathlib import Path

import numpy as np

import tokenwire
from tokenwire import MalformedResponseError, _core, samples

corpus = Path(__file__).parent.parent / "tests" / "corpus"
inputs = [(samples.sample(n), samples.SAMPLES[n].top_k) for n in ("compact_8k_top20", "moe_16k", "multi_choice")]
inputs += [((corpus / f"{name}.json").read_bytes(), 3) for name in json.loads((corpus / "expected.json").read_text())]
for path in [p for p in ("scalar", "avx2") if p in _core.simd_paths()]:
    _core.set_simd_path(path)
    for raw, k in inputs:
        for cut in (len(raw), len(raw) // 2):
            try:
                tokenwire.parse_generate_response(raw[:cut], top_k=None if len(raw) > 100_000 else k)
            except MalformedResponseError:
                pass
    ids = np.arange(40, dtype=np.uint32)
    field = tokenwire.encode_compact_logprobs(ids, -np.linspace(0, 3, 40, dtype=np.float32), [0, 20, 40], 19)
    tokenwire.dumps_generate_response({"choices": [{"token_ids": [0, 20], "compact_logprobs": field}]})
    for n in range(0, 70):
        tokenwire.b64decode(tokenwire.b64encode(bytes(range(n))))
    # OpenAI-compatible and SGLang responses, whole, cut and with a bad value.
    n = 300
    ids = list(range(1000, 1000 + n))
    lps = [-0.5 - i / 1000 for i in range(n)]
    completions = {"choices": [{"index": 0, "token_ids": ids, "finish_reason": "stop",
                                "logprobs": {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": lps,
                                             "text_offset": list(range(n)), "top_logprobs": None}}],
                   "usage": {"completion_tokens": n}}
    chat = {"choices": [{"index": 0, "token_ids": ids, "finish_reason": "stop", "logprobs": {
        "content": [{"token": f"token_id:{i}", "logprob": v, "top_logprobs": []} for i, v in zip(ids, lps)]}}]}
    sglang = {"output_ids": ids, "meta_info": {"completion_tokens": n,
                                               "output_token_logprobs": [[v, i, None] for i, v in zip(ids, lps)]}}
    parsers = ((tokenwire.parse_completions_response, completions), (tokenwire.parse_chat_completions_response, chat),
               (tokenwire.parse_sglang_generate_response, sglang))
    for parse, doc in parsers:
        good = json.dumps(doc).encode()
        bad = good.replace(b"-0.501", b"null", 1)
        for raw in (good, good[: len(good) // 2], bad):
            try:
                parse(raw)
            except MalformedResponseError:
                pass
    # The same with heads of 2 from 4 candidates (and 80 in one row: the hashed duplicate check),
    # whole, with a bad candidate, a repeated key and an escaped key.
    cands = [[(i + j, v - j) for j in range(80 if t == 7 else 4)] for t, (i, v) in enumerate(zip(ids, lps))]
    completions["choices"][0]["logprobs"]["top_logprobs"] = [{f"token_id:{c}": p for c, p in row} for row in cands]
    chat["choices"][0]["logprobs"]["content"] = [
        {"token": f"token_id:{i}", "logprob": v, "top_logprobs": [{"token": f"token_id:{c}", "logprob": p}
                                                                 for c, p in row]}
        for i, v, row in zip(ids, lps, cands)]
    sglang["meta_info"]["output_top_logprobs"] = [[[p, c, None] for c, p in row] for row in cands]
    for parse, doc in parsers:
        good = json.dumps(doc).encode()
        for raw in (good, good.replace(b"-1.511", b"0.5", 1), good.replace(b'"token_id:1009": -0.509',
                    b'"token_id:1009": -0.509, "token_id:1009": -0.509', 1), good.replace(b'"token_id:1', b'"token_id:\\u0031', 3)):
            try:
                parse(raw, top_k=2)
            except MalformedResponseError:
                pass
    # The batch path: the samples parsed on two threads (a broken body among them), then collated.
    bodies = [samples.sample("multi_choice"), b'{"choices": []}', samples.sample("multi_choice")]
    parsed = [r for r in tokenwire.parse_many(bodies, top_k=4, threads=2, errors="collect")
              if isinstance(r, tokenwire.GenerateResponse)]
    batch = tokenwire.collate(parsed, pad_id=-1, threads=2)
    tokenwire.collate(parsed, out=batch, threads=1)
    tokenwire.collate(tokenwire.parse_many([samples.sample("moe_16k")], threads=1), threads=2)
print("memcheck workload done")
