/* libFuzzer target: every code path on the same input, failing on any difference.

   Each input goes through the scanner and the record readers (fuzz_doc.h: FZ_SCAN and
   FZ_RECORDS), the base64 codec (fuzz_base64.h) and head selection with the per-token rules
   (fuzz_heads.h), once per path this CPU runs (scalar, AVX2, AVX-512; NEON on aarch64); every
   output goes to a log, and each path's log must equal the scalar path's byte for byte
   (doubles with their NaNs made one NaN). The kernels' own checks run on every path too. */
#include "fuzz_base64.h"
#include "fuzz_doc.h"
#include "fuzz_heads.h"

typedef void (*fz_run)(const uint8_t *data, size_t size, int path, fz_log *l);

static void fz_doc_all(const uint8_t *data, size_t size, int path, fz_log *l)
{
    fz_doc(data, size, path, FZ_SCAN | FZ_RECORDS, l);
}

static const struct {
    const char *name;
    fz_run run;
} KERNELS[] = {{"scanner and record readers", fz_doc_all}, {"base64", fz_base64}, {"heads and rules", fz_heads}};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int paths[TW_PATH_LAST + 1];
    int n = fz_paths(paths);
    for (size_t k = 0; k < sizeof KERNELS / sizeof KERNELS[0]; k++) {
        fz_log first = {0};
        KERNELS[k].run(data, size, paths[0], &first);
        for (int i = 1; i < n; i++) {
            fz_log other = {0};
            KERNELS[k].run(data, size, paths[i], &other);
            size_t at = 0;
            while (at < first.n && at < other.n && first.p[at] == other.p[at])
                at++;
            FZ_CHECK(at == first.n && at == other.n,
                     "%s: the %s path differs from the %s path at byte %zu of their logs (%zu and %zu bytes)",
                     KERNELS[k].name, tw_path_name(paths[i]), tw_path_name(paths[0]), at, other.n, first.n);
            fz_free(&other);
        }
        fz_free(&first);
    }
    return 0;
}
