/* libFuzzer target: the base64 codec (fuzz_base64.h). */
#include "fuzz_base64.h"
#define FZ_RUN fz_base64
#include "fuzz_target.h"
