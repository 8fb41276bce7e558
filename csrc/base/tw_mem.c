/* tw_mem: a bounded size-class cache of large blocks over the C allocator (see tw_mem.h). */
#define _POSIX_C_SOURCE 200112L  /* posix_memalign */
#include "base/tw_mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#include <malloc.h>
#include <windows.h>
static SRWLOCK tw_mem_lock = SRWLOCK_INIT;
#define TW_LOCK() AcquireSRWLockExclusive(&tw_mem_lock)
#define TW_UNLOCK() ReleaseSRWLockExclusive(&tw_mem_lock)
static void *tw_aligned(size_t n) { return _aligned_malloc(n, 64); }
static void tw_aligned_free(void *p) { _aligned_free(p); }
#else
#include <pthread.h>
static pthread_mutex_t tw_mem_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t tw_mem_once = PTHREAD_ONCE_INIT;
/* A fork() while another thread holds the lock would leave the child's copy locked for
   good: hold it across the fork, and release it on both sides. */
static void tw_fork_prepare(void) { pthread_mutex_lock(&tw_mem_lock); }
static void tw_fork_release(void) { pthread_mutex_unlock(&tw_mem_lock); }
static void tw_mem_setup(void) { pthread_atfork(tw_fork_prepare, tw_fork_release, tw_fork_release); }
#define TW_LOCK() (pthread_once(&tw_mem_once, tw_mem_setup), pthread_mutex_lock(&tw_mem_lock))
#define TW_UNLOCK() pthread_mutex_unlock(&tw_mem_lock)
static void *tw_aligned(size_t n) {
    void *p = NULL;
    return posix_memalign(&p, 64, n) == 0 ? p : NULL;
}
static void tw_aligned_free(void *p) { free(p); }
#endif

#if defined(__SANITIZE_ADDRESS__)
#define TW_MEM_START_LIMIT 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define TW_MEM_START_LIMIT 0
#endif
#endif
#ifndef TW_MEM_START_LIMIT
#define TW_MEM_START_LIMIT TW_MEM_DEFAULT_LIMIT
#endif

/* Every block starts with this, just below the pointer handed out. */
typedef struct {
    size_t cap;   /* large: usable bytes; small: 0 */
    size_t info;  /* large: size class, or TW_NO_CLASS; small: the requested size */
} tw_hdr;

#define TW_HDR(p) ((tw_hdr *)((char *)(p) - sizeof(tw_hdr)))
#define TW_LARGE_PAD 64                 /* large blocks: 64-byte aligned data */
#define TW_SMALL_PAD sizeof(tw_hdr)     /* small blocks: malloc's alignment */
#define TW_CLASSES 192                  /* 4 per power of two from 2**16 to 2**64 */
#define TW_NO_CLASS ((size_t)-1)

static void *tw_free_list[TW_CLASSES];  /* freed blocks, linked through their first word */
static size_t tw_class_bytes[TW_CLASSES]; /* bytes held in each class's list */
static size_t tw_cached_bytes;
static size_t tw_cached_blocks;
static size_t tw_limit = TW_MEM_START_LIMIT;
static size_t tw_hits, tw_misses;

static unsigned tw_log2(size_t v) {  /* floor(log2(v)), v > 0 */
    unsigned k = 0;
    while (v >>= 1) k++;
    return k;
}

/* The smallest class holding n bytes (n >= TW_MEM_LARGE), and its size in *cap. */
static size_t tw_class(size_t n, size_t *cap) {
    unsigned k = tw_log2(n - 1);  /* 2**k < n <= 2**(k + 1) */
    size_t quarter = (size_t)1 << (k - 2);
    size_t j = (n - ((size_t)1 << k) + quarter - 1) / quarter;  /* 1..4 */
    size_t cls = (size_t)(k - 15) * 4 + j - 4;  /* k >= 15: class 0 is exactly 2**16 */
    *cap = ((size_t)1 << k) + j * quarter;
    return cls;
}

static void *tw_pop(size_t cls) {
    void *p = tw_free_list[cls];
    if (p != NULL) {
        tw_free_list[cls] = *(void **)p;
        tw_class_bytes[cls] -= TW_HDR(p)->cap;
        tw_cached_bytes -= TW_HDR(p)->cap;
        tw_cached_blocks--;
    }
    return p;
}

static void tw_release(void *p) {
    tw_aligned_free((char *)p - TW_LARGE_PAD);
}

void *tw_mem_alloc(size_t n) {
    if (n < TW_MEM_LARGE) {
        char *base = malloc(n + TW_SMALL_PAD);
        if (base == NULL) return NULL;
        tw_hdr *h = (tw_hdr *)base;
        h->cap = 0;
        h->info = n;
        return base + TW_SMALL_PAD;
    }
    if (n > SIZE_MAX / 2) return NULL;
    size_t cap;
    size_t cls = tw_class(n, &cap);
    void *p = NULL;
    int cacheable;
    TW_LOCK();
    cacheable = cls < TW_CLASSES && cap <= tw_limit;  /* decided under the lock */
    if (cacheable) {
        /* The class itself, else the next one up (at most half as much again). */
        p = tw_pop(cls);
        if (p == NULL && cls + 1 < TW_CLASSES) p = tw_pop(cls + 1);
        if (p != NULL) tw_hits++;
    }
    if (p == NULL) tw_misses++;
    TW_UNLOCK();
    if (p != NULL) return p;
    if (!cacheable) {  /* never cached: no rounding up */
        cls = TW_NO_CLASS;
        cap = (n + 63) & ~(size_t)63;
    }
    char *base = tw_aligned(cap + TW_LARGE_PAD);
    if (base == NULL) return NULL;
    p = base + TW_LARGE_PAD;
    TW_HDR(p)->cap = cap;
    TW_HDR(p)->info = cls;
    return p;
}

void *tw_mem_calloc(size_t count, size_t size) {
    if (size != 0 && count > SIZE_MAX / size) return NULL;
    size_t n = count * size;
    void *p = tw_mem_alloc(n);
    if (p != NULL) memset(p, 0, n);
    return p;
}

void tw_mem_free(void *p) {
    if (p == NULL) return;
    tw_hdr *h = TW_HDR(p);
    if (h->cap == 0) {
        free((char *)p - TW_SMALL_PAD);
        return;
    }
    size_t cls = h->info, cap = h->cap;
    if (cls == TW_NO_CLASS) {
        tw_release(p);
        return;
    }
    TW_LOCK();
    /* Make room by dropping smaller cached blocks first (the large ones cost the most to
       fault in again), but only when that makes room: otherwise the block goes back to
       the system and the cache stays as it is. */
    size_t below = 0;
    for (size_t c = 0; c < cls; c++) below += tw_class_bytes[c];
    int fits = cap <= tw_limit && tw_cached_bytes - below + cap <= tw_limit;
    for (size_t c = 0; fits && c < cls && tw_cached_bytes + cap > tw_limit; c++) {
        void *q;
        while (tw_cached_bytes + cap > tw_limit && (q = tw_pop(c)) != NULL) {
            TW_UNLOCK();
            tw_release(q);
            TW_LOCK();
        }
    }
    if (fits && tw_cached_bytes + cap <= tw_limit) {
        *(void **)p = tw_free_list[cls];
        tw_free_list[cls] = p;
        tw_class_bytes[cls] += cap;
        tw_cached_bytes += cap;
        tw_cached_blocks++;
        p = NULL;
    }
    TW_UNLOCK();
    if (p != NULL) tw_release(p);
}

void *tw_mem_realloc(void *p, size_t n) {
    if (p == NULL) return tw_mem_alloc(n);
    tw_hdr *h = TW_HDR(p);
    size_t have = h->cap ? h->cap : h->info;
    if (h->cap == 0 && n < TW_MEM_LARGE) {
        char *base = realloc((char *)p - TW_SMALL_PAD, n + TW_SMALL_PAD);
        if (base == NULL) return NULL;
        ((tw_hdr *)base)->info = n;
        return base + TW_SMALL_PAD;
    }
    if (h->cap != 0 && n <= h->cap && n >= h->cap / 2) return p;  /* fits, little waste */
    void *q = tw_mem_alloc(n);
    if (q == NULL) return NULL;
    memcpy(q, p, have < n ? have : n);
    tw_mem_free(p);
    return q;
}

size_t tw_mem_set_limit(size_t bytes) {
    void *drop = NULL;  /* blocks to release, linked, outside the lock */
    TW_LOCK();
    size_t previous = tw_limit;
    tw_limit = bytes;
    for (size_t c = 0; c < TW_CLASSES && tw_cached_bytes > tw_limit; c++) {
        void *q;
        while (tw_cached_bytes > tw_limit && (q = tw_pop(c)) != NULL) {
            *(void **)q = drop;
            drop = q;
        }
    }
    TW_UNLOCK();
    while (drop != NULL) {
        void *next = *(void **)drop;
        tw_release(drop);
        drop = next;
    }
    return previous;
}

void tw_mem_get_stats(tw_mem_stats *out) {
    TW_LOCK();
    out->cached_bytes = tw_cached_bytes;
    out->cached_blocks = tw_cached_blocks;
    out->limit = tw_limit;
    out->hits = tw_hits;
    out->misses = tw_misses;
    TW_UNLOCK();
}
