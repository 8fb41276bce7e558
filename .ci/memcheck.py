"""A representative workload for valgrind memcheck: every sample, the adversarial corpus and
the writers, on the scalar and AVX2 paths (valgrind cannot run AVX-512)."""

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
print("memcheck workload done")
