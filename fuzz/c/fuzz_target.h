/* One libFuzzer target over one of the fuzz_*.h kernels' runs: FZ_RUN(data, size, path, log)
   on a path this CPU runs, chosen by the input's length (so every path gets inputs);
   fuzz_paths.c runs every path on each input and compares them. */
#ifndef FUZZ_TARGET_H
#define FUZZ_TARGET_H

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int paths[TW_PATH_LAST + 1];
    int n = fz_paths(paths);
    FZ_RUN(data, size, paths[size % (size_t)n], NULL);
    return 0;
}

#endif
