"""The markers and limits of the wire formats, shared by the kernels, the extractors, the rules
and the writers."""

# vLLM writes this both for a missing logprob and as the clamp of -inf, so a sampled
# token at this value carries no evidence; a top-k candidate at it was filtered out.
VLLM_LOGPROB_SENTINEL = -9999.0
# NVIDIA Dynamo's vLLM worker writes this for a non-finite logprob in its engine data (JSON has
# no -inf): a sampled token at this value carries no evidence either.
DYNAMO_LOGPROB_CLAMP = -1e30
# llama.cpp's server writes the lowest float for log(0) (its JSON library would turn -inf into
# null; completion_token_output::logarithm in tools/server/server-task.cpp), -FLT_MAX as a
# double: a sampled token at it carries no evidence, a candidate at it had no probability.
LLAMA_LOGPROB_LOG0 = -3.4028234663852886e38
COMPACT_FORMAT = "u32-f32-le-v1"
# Compact rows store ids as u32, so no id outside this range can ever be matched.
MAX_TOKEN_ID = 2**32 - 1
MAX_MASK_ID = 2**31 - 1  # sampling masks are int32 on the wire
MAX_OFFSET = 2**63 - 1  # offsets index an int64-addressed buffer
