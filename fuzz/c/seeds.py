"""Seed corpora for the libFuzzer targets (make seeds): OUT/doc for the document targets,
OUT/raw for base64 and heads, OUT/sse for the stream scan.

    python fuzz/c/seeds.py OUT        (tokenwire importable: the pure-Python build is enough)

doc: every tests/corpus document and small responses of every transport and format (the
sample builders), each behind the settings byte fuzz_doc.h reads: a generate document with
decoding and records read during the scan (0x0C) and with every field blanked besides
(0x1C), an OpenAI-compatible one (0x01), an SGLang one (0x02). raw: the same documents as they
are, and base64 texts of each length modulo 4. sse: vLLM's generate, completions and chat
streams (one and several choices, one and several tokens per event, a keep-alive), each
behind fuzz_sse.c's two settings bytes (the form; the size of the pieces).
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

from tokenwire import samples

CORPUS = Path(__file__).resolve().parent.parent.parent / "tests" / "corpus"
GENERATE, GENERATE_BLANK, OPENAI, SGLANG = 0x0C, 0x1C, 0x01, 0x02


def generate_documents() -> dict[str, bytes]:
    out = {}
    for i, transport in enumerate(("native", "packed", "compact", "top_k", "sampled", "native_sampled")):
        for mask in (None, "list", "csr", "kept"):
            ev = samples.evidence(3, 4, seed=i, support=mask is not None)
            routed = samples.routing(3, layers=2, topk=2) if transport == "packed" else None
            choice = samples.build_choice(ev, transport=transport, mask=mask, routed=routed)
            out[f"{transport}-{mask}"] = samples.dumps(samples.response([choice], prompt_tokens=2))
    return out


def openai_documents() -> tuple[dict[str, bytes], dict[str, bytes]]:
    ids, lps = [7, 8, 1 << 20], [-0.5, -1.25, -2.0]
    tokens = [f"token_id:{i}" for i in ids]
    heads = [[(i, v), (100 + i, v - 1), (200 + i, v - 2)] for i, v in zip(ids, lps)]
    completions = {"object": "text_completion", "choices": [{"index": 0, "token_ids": ids, "logprobs": {
        "tokens": tokens, "token_logprobs": lps, "text_offset": [0, 1, 2],
        "top_logprobs": [{f"token_id:{i}": v for i, v in head} for head in heads]}}], "usage": {"completion_tokens": 3}}
    entries = [{"token": t, "logprob": v, "top_logprobs": [{"token": f"token_id:{i}", "logprob": w} for i, w in head]}
               for t, v, head in zip(tokens, lps, heads)]
    chat = {"object": "chat.completion", "choices": [{"index": 0, "logprobs": {"content": entries},
                                                      "raw_output": {"completion_token_ids": ids}}],
            "prompt_token_ids": [1, 2]}
    item = {"output_ids": ids, "meta_info": {
        "completion_tokens": 3, "output_token_logprobs": [[v, i, "t"] for i, v in zip(ids, lps)],
        "output_top_logprobs": [[[w, i, None] for i, w in head] for head in heads],
        "output_token_sampling_mask": [[i] for i in ids], "routed_experts": base64.b64encode(bytes(3 * 4 * 4)).decode()}}
    dump = lambda doc: json.dumps(doc, separators=(",", ":")).encode()  # noqa: E731
    return ({"completions": dump(completions), "chat": dump(chat)},
            {"sglang-item": dump(item), "sglang-batch": dump([item, item])})


def streams() -> dict[str, bytes]:
    """Small SSE bodies laid out as vLLM's stream generators lay them out, by form (0 generate,
    1 completions, 2 chat)."""
    out: dict[str, bytes] = {}
    for choices in (1, 2):
        for per in (1, 3):
            ids = [[5 + 7 * c + t for t in range(5)] for c in range(choices)]
            for form, name in enumerate(("generate", "completions", "chat")):
                chunks: list[dict] = []
                for c in range(choices):
                    for a in range(0, 5, per):
                        part = ids[c][a:a + per]
                        if form == 1:
                            lps = {"tokens": [f"token_id:{i}" for i in part], "token_logprobs": [-0.5] * len(part),
                                   "top_logprobs": [{f"token_id:{i}": -0.5} for i in part],
                                   "text_offset": list(range(a, a + len(part)))}
                            choice = {"index": c, "text": "ab", "logprobs": lps, "token_ids": part,
                                      "prompt_token_ids": [1, 2] if a == 0 else None}
                        else:
                            records = [{"token": f"token_id:{i}", "logprob": -0.5, "bytes": None,
                                        "top_logprobs": [{"token": f"token_id:{i}", "logprob": -0.5}]} for i in part]
                            choice = {"index": c, "logprobs": {"content": records}, "token_ids": part}
                            if form == 2:
                                choice["delta"] = {"role": "assistant", "content": "ab"} if a == 0 else {"content": "c"}
                        choice["finish_reason"] = "stop" if a + per >= 5 else None
                        chunk = {"id": "x", "object": ["x", "text_completion", "chat.completion.chunk"][form],
                                 "choices": [choice], "usage": None}
                        if not chunks and form != 1:
                            chunk["prompt_token_ids"] = [1, 2]
                        chunks.append(chunk)
                chunks.append({"id": "x", "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 5}})
                body = b": keep-alive\n\n" + b"".join(b"data: " + json.dumps(c, separators=(",", ":")).encode()
                                                     + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
                out[f"{name}-{choices}x{per}"] = bytes([form, 16 * per]) + body
    return out


def main() -> int:
    out = Path(sys.argv[1])
    (out / "doc").mkdir(parents=True, exist_ok=True)
    (out / "raw").mkdir(parents=True, exist_ok=True)
    openai, sglang = openai_documents()
    corpus = {p.stem: p.read_bytes() for p in sorted(CORPUS.glob("*.json"))}
    groups = [(generate_documents(), (GENERATE, GENERATE_BLANK)), (openai, (OPENAI,)), (sglang, (SGLANG,)),
              (corpus, (GENERATE, GENERATE_BLANK, OPENAI, SGLANG))]
    for documents, settings in groups:
        for name, raw in documents.items():
            (out / "raw" / name).write_bytes(raw)
            for s in settings:
                (out / "doc" / f"{s:02x}-{name}").write_bytes(bytes([s]) + raw)
    (out / "sse").mkdir(parents=True, exist_ok=True)
    for name, raw in streams().items():
        (out / "sse" / name).write_bytes(raw)
    for n in range(1, 9):
        (out / "raw" / f"base64-{n}").write_bytes(base64.b64encode(bytes(range(n * 7))))
    docs, raws = len(list((out / "doc").iterdir())), len(list((out / "raw").iterdir()))
    print(f"seeds: {docs} documents, {raws} raw inputs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
