/* tw_mem: the allocator behind every buffer a parse makes (arrays it returns, scratch).
 *
 * Why: a trainer parses one response, uses its arrays, drops them and parses the next,
 * each of a different size.  With glibc's defaults the blocks of one parse are taken from
 * the top of the heap (or mmap'd) and given back to the kernel when they are freed, so
 * the next parse faults every page in anew: for an 8k-token top-20 response that is about
 * 1,800 minor faults and most of the parse time.  tw_mem keeps freed large blocks, sorted
 * into size classes a quarter of a power of two apart, and hands them out again, so a
 * loop of parses reuses memory that is already mapped.  The cache is bounded
 * (tw_mem_set_limit; blocks that do not fit go back to the system at once) and shared by
 * all threads under one lock.
 *
 * Blocks are 64-byte aligned from TW_MEM_LARGE bytes up, 16-byte aligned below.  Every
 * block, large or small, is released with tw_mem_free (never free()).  tw_mem_realloc
 * keeps the contents up to the smaller of the two sizes.  All functions are thread-safe
 * and need no Python.  Under AddressSanitizer and MemorySanitizer the default limit is 0
 * (nothing is cached), so a use after free, or a read of bytes a block's earlier user wrote
 * and this one did not, is still reported.
 */
#ifndef TW_MEM_H
#define TW_MEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Requests from this size up come from the size-class cache. */
#define TW_MEM_LARGE ((size_t)1 << 16)
/* The default bound on cached bytes. */
#define TW_MEM_DEFAULT_LIMIT ((size_t)64 << 20)

void *tw_mem_alloc(size_t n);
void *tw_mem_calloc(size_t count, size_t size);
void *tw_mem_realloc(void *p, size_t n);
void tw_mem_free(void *p);

/* Bound the cached bytes (0: cache nothing, and release what is cached); returns the
   previous bound.  Cached blocks beyond a lowered bound are released at once. */
size_t tw_mem_set_limit(size_t bytes);

typedef struct {
    size_t cached_bytes;  /* held in the cache now */
    size_t cached_blocks;
    size_t limit;
    size_t hits;          /* large requests served from the cache */
    size_t misses;        /* large requests that went to the system */
} tw_mem_stats;

void tw_mem_get_stats(tw_mem_stats *out);

#ifdef __cplusplus
}
#endif

#endif
