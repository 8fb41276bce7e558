/* libFuzzer target: the structural scanner and its read-back helpers (fuzz_doc.h). */
#include "fuzz_doc.h"
#define FZ_RUN(data, size, path, log) fz_doc(data, size, path, FZ_SCAN, log)
#include "fuzz_target.h"
