/* libFuzzer target: head selection and the per-token rules (fuzz_heads.h). */
#include "fuzz_heads.h"
#define FZ_RUN fz_heads
#include "fuzz_target.h"
