/* libFuzzer target: every record reader over every array the scanner records (fuzz_doc.h). */
#include "fuzz_doc.h"
#define FZ_RUN(data, size, path, log) fz_doc(data, size, path, FZ_RECORDS, log)
#include "fuzz_target.h"
