/*
 * tw_scan - structural scanner for /inference/v1/generate documents.
 * See tw_scan.h for the contract.
 *
 * Layout: one iterative pass (tw_scan) driven by gotos between four states
 * (value, element, key, after) over an explicit, heap-grown stack of open
 * containers.  Each open container carries a "context" saying which recorded
 * path it is (root object, choices array, a choice, compact_logprobs, ...);
 * keys are compared only inside such containers, so ignored subtrees cost a
 * plain validation.  String contents are skipped with a kernel that finds
 * the first byte that is '"', '\\', < 0x20 or >= 0x80 (AVX2 with an SSE2
 * probe on the x86-64 SIMD paths, NEON on aarch64, 8-byte SWAR on
 * TW_PATH_SCALAR); escapes and
 * non-ASCII bytes are then validated by scalar code and the kernel resumes
 * after them.
 *
 * A logprobs.content array may be handed to tw_doc.content_reader instead,
 * which validates it as this loop would while reading its records (see
 * "Records read during the scan" in tw_scan.h).
 *
 * The byte-level checks (whitespace, the string skip kernels, strings,
 * numbers) and the digit runs of integer arrays are static inline in
 * tw_scan_internal.h; what a caller reads after the scan (the document's
 * lifetime, the stripped copy, the recorded values read again) is
 * tw_scan_values.c.
 */
#include "json/tw_scan_internal.h"
#include "codecs/tw_base64.h"


/* ------------------------------------------------------------------------ */
/* Paths                                                                     */
/* ------------------------------------------------------------------------ */

/* Contexts of open containers: the structural ones, then one for each object on the way to
   a field of the wire table (tw_fields.def). */
enum {
    TWS_C_NONE = 0,  /* ignored subtree */
    TWS_C_TOP,       /* the root object */
    TWS_C_CHOICES,   /* root.choices (array) */
    TWS_C_CHOICE,    /* a choice object */
    TWS_C_SGL_ITEMS, /* SGLang: the root array of items */
    TWS_C_SGL_ITEM,  /* SGLang: an item (the root object, or an element) */
#define TWS_CONTEXT(name, path) TWS_C_##name,
#include "json/tw_fields.def"
    TWS_NCONTEXTS
};
typedef char tws_contexts_fit_a_byte[(TWS_NCONTEXTS <= 256) ? 1 : -1];

/* Record targets: none, the root fields, or TWS_T_F0 + TW_F_*. */
enum {
    TWS_T_NONE = 0,
#define TWS_ROOT(name, path) TWS_T_##name,
#include "json/tw_fields.def"
    TWS_T_F0
};
#define TWS_F(f) (TWS_T_F0 + (f))
#define TWS_BIT(t) (UINT64_C(1) << (t))
#define TWS_FB(f) (UINT64_C(1) << (f))
/* Every record target is a bit of a uint64_t mask (blank_fields shifted by TWS_T_F0). */
typedef char tws_targets_fit_a_mask[(TWS_T_F0 + TW_NFIELDS <= 64) ? 1 : -1];

/* Sets of targets: TWS_BLANK_STR / TWS_BLANK_ARR (blanked when strings / arrays by the
   generate scan), TWS_BLANK_ARR_OPENAI (by the OpenAI-compatible scan), TWS_B64 (decoded as
   base64 during the generate scan), TWS_UINTS (id and offset arrays read during the scan),
   TWS_READ_MASK (a sampling_mask list read so), TWS_READ_RECORDS (handed to the content
   reader). */
#define TWS_SET(name, targets) static const uint64_t TWS_##name = (targets);
#include "json/tw_fields.def"

#define TWS_MAX_KEY 40 /* longer (unescaped) keys match nothing */

typedef struct {
    uint8_t ctx;      /* container the key is in */
    uint8_t len;
    char name[TWS_MAX_KEY];
    uint8_t tgt;      /* record target of the value */
    uint8_t ctx_obj;  /* context if the value is an object */
    uint8_t ctx_arr;  /* context if the value is an array */
    uint64_t clear;   /* TW_F_* bits cleared when the key occurs */
    uint64_t clear_root; /* TWS_BIT(TWS_T_*) of the root records beneath a root key, cleared so */
} tws_rule;

/* The keys on the paths of the wire table, each in the context of the object holding it,
   sorted by (context, key length, key bytes) (csrc/gen_fields.py writes them so). */
static const tws_rule TWS_RULES[] = {
#define TWS_KEY(ctx, name, tgt, cobj, carr, clear, clear_root) \
    {TWS_C_##ctx, (uint8_t)(sizeof(name) - 1), name, tgt, TWS_C_##cobj, TWS_C_##carr, clear, clear_root},
#include "json/tw_fields.def"
};
#define TWS_NRULES (sizeof TWS_RULES / sizeof TWS_RULES[0])

/* The rule of key [k, ke) (raw, escaped when flags has TWS_STR_ESCAPE) in context ctx, or
   NULL: a binary search over TWS_RULES, about six comparisons whatever the key. */
static const tws_rule *tws_match(unsigned ctx, const uint8_t *k, const uint8_t *ke,
                                 unsigned flags)
{
    uint8_t tmp[TWS_MAX_KEY];
    size_t n = (size_t)(ke - k);
    if (flags & TWS_STR_ESCAPE) {
        n = tw_unescape_body(k, ke, tmp, sizeof tmp);
        if (n == SIZE_MAX)
            return NULL;
        k = tmp;
    }
    if (n >= TWS_MAX_KEY)
        return NULL;
    size_t lo = 0, hi = TWS_NRULES;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const tws_rule *r = &TWS_RULES[mid];
        int c = r->ctx != ctx ? (r->ctx < ctx ? -1 : 1)
              : r->len != n   ? (r->len < n ? -1 : 1)
                              : memcmp(r->name, k, n);
        if (c == 0)
            return r;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* The document                                                              */
/* ------------------------------------------------------------------------ */

typedef struct {
    size_t start; /* offset of the opening bracket */
    size_t count; /* elements so far (arrays) */
    size_t ci;    /* choice index (choice contexts) */
    uint8_t is_obj, ctx, tgt, all_int;
} tws_frame;



/* The elements of an array of unsigned integer literals written without whitespace
   ("[12,0,345]", p at the first element), each at most 19 digits (below 2^64), appended to
   d->uints; returns the byte past ']' with their number in *count. NULL when the array is
   anything else (nothing is kept: the general scan reads it), with *nomem set when memory
   ran out. On the SIMD paths (`simd`: the resolved path, 0 on the scalar one) a block of 64
   bytes at a time while tws_uint_block_on takes elements, else (and for an element it
   leaves) one element at a time. */
static const uint8_t *tws_uint_run(tw_doc *d, const uint8_t *p, const uint8_t *end,
                                   size_t *count, int *nomem, int simd)
{
    size_t n = d->nuints;
#ifdef TW_SIMD16
    const uint8_t *block_at = p; /* where the next block may start */
#endif
    for (;;) {
        uint64_t x = 0;
        size_t k = 0;
        if (d->uints_cap - n < 32) { /* room for a block's elements, 32 at most */
            void *arr = d->uints;
            if (tw_doc_grow(&arr, &d->uints_cap, n + 31, sizeof(uint64_t), 1024)) {
                *nomem = 1;
                return NULL;
            }
            d->uints = (uint64_t *)arr;
        }
#ifdef TW_SIMD16
        if (simd && p >= block_at && end - p >= 72) {
            size_t got = tws_uint_block_on(simd, p, UINT64_MAX, 32, d->uints + n, &p);
            n += got;
            if (got)
                continue;
            /* an element the block cannot take: the next 64 bytes go the serial way, so
               that runs of long elements do not pay for a block each */
            block_at = p + 64;
        }
#else
        (void)simd;
#endif
        if (TW_LIKELY(end - p >= 8))
            k = tws_digits8(p, &x);
        if (k == 0) { /* 8 digits or more, or the last bytes */
            while (p + k < end && p[k] >= '0' && p[k] <= '9' && k < 20) {
                x = x * 10 + (uint64_t)(p[k] - '0');
                k++;
            }
            if (k == 0 || k > 19)
                return NULL;
        }
        if (k > 1 && *p == '0') /* a leading zero: not JSON */
            return NULL;
        d->uints[n++] = x;
        p += k;
        if (p == end)
            return NULL;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p != ']')
            return NULL;
        *count = n - d->nuints;
        d->nuints = n;
        return p + 1;
    }
}

/* A list of such arrays ("[[5,9],[],[7]]", p at the first row), the sampling_mask list
   form (`simd` as tws_uint_run's): each row's length, then its elements, appended to
   d->uints; returns the byte past the outer ']' with the number of rows in *rows. NULL when
   the list is anything else (nothing is kept: the general scan reads it), with *nomem set
   when memory ran out. */
static const uint8_t *tws_nested_run(tw_doc *d, const uint8_t *p, const uint8_t *end,
                                     size_t *rows, int *nomem, int simd)
{
    size_t first = d->nuints, r = 0;
    for (;;) {
        size_t slot = d->nuints, n = 0;
        if (*p != '[')
            break;
        if (d->uints_cap == slot) {
            void *arr = d->uints;
            if (tw_doc_grow(&arr, &d->uints_cap, slot + 1, sizeof(uint64_t), 1024)) {
                *nomem = 1;
                break;
            }
            d->uints = (uint64_t *)arr;
        }
        d->nuints = slot + 1;
        if (++p == end)
            break;
        if (*p == ']') {
            p++;
        } else {
            p = tws_uint_run(d, p, end, &n, nomem, simd);
            if (!p)
                break;
        }
        d->uints[slot] = n;
        r++;
        if (p == end)
            break;
        if (*p == ']') {
            *rows = r;
            return p + 1;
        }
        if (*p != ',' || ++p == end)
            break;
    }
    d->nuints = first;
    return NULL;
}

/* Root targets are the root rows in table order (TWS_T_NONE before them): TWS_T_x - 1 is
   TW_R_x, and prompt_token_ids and choices are the first two root records. */
typedef char tws_root_targets_are_root_rows[(TWS_T_F0 - 1 == TW_NROOT && TWS_T_PROMPT == TW_R_PROMPT + 1 &&
                                             TW_R_PROMPT == 0 && TW_R_CHOICES == 1) ? 1 : -1];

static inline tw_value *tws_slot(tw_doc *d, unsigned tgt, size_t ci)
{
    if (tgt < TWS_T_F0)
        return &d->root[tgt - 1];
    return &d->choice[ci].f[tgt - TWS_T_F0];
}

static int tws_add_blank(tw_doc *d, size_t start, size_t end)
{
    void *arr = d->blank;
    if (start >= end)
        return 0;
    /* Spans are added as their values close, so a container closes after the
       values inside it: spans it contains are the last ones, and it replaces
       them.  The list stays sorted and disjoint in one pass. */
    while (d->nblank > 0 && d->blank[d->nblank - 1].start >= start) {
        d->nblank--;
        d->blank_bytes -= d->blank[d->nblank].end - d->blank[d->nblank].start;
    }
    if (tw_doc_grow(&arr, &d->blank_cap, d->nblank, sizeof(tw_span), 16))
        return -1;
    d->blank = (tw_span *)arr;
    d->blank[d->nblank].start = start;
    d->blank[d->nblank].end = end;
    d->nblank++;
    d->blank_bytes += end - start;
    return 0;
}

static int tws_add_choice(tw_doc *d, int is_object)
{
    void *arr = d->choice;
    if (tw_doc_grow(&arr, &d->choice_cap, d->nchoices, sizeof(tw_choice), 4))
        return -1;
    d->choice = (tw_choice *)arr;
    memset(&d->choice[d->nchoices], 0, sizeof(tw_choice));
    d->choice[d->nchoices].is_object = (uint8_t)(is_object != 0);
    d->nchoices++;
    return 0;
}

/*
 * tws_string for a string at a base64 path, decoding it on the way when it
 * is long (see "Decoding during the scan" in tw_scan.h).  Same result as
 * tws_string; *blob gets the 1-based index of the decoded buffer, or 0.
 */
static const uint8_t *tws_string_b64(tw_doc *d, const uint8_t *s,
                                     const uint8_t *end, int simd,
                                     unsigned *flags, tws_err *e,
                                     uint16_t *blob)
{
    size_t avail = (size_t)(end - s), cap, n, total;
    const uint8_t *q;
    uint8_t *dst;
    ptrdiff_t got;
    *blob = 0;
    if (avail < TW_SCAN_FUSE_MIN || d->nblobs >= 0xFFFF ||
        tws_skip(s, s + TW_SCAN_FUSE_MIN, simd) != s + TW_SCAN_FUSE_MIN)
        return tws_string(s, end, simd, flags, e);
    if (d->nblobs == d->blobs_cap) {
        void *arr = d->blobs;
        if (tw_doc_grow(&arr, &d->blobs_cap, d->nblobs, sizeof(tw_blob), 4))
            return tws_string(s, end, simd, flags, e);
        d->blobs = (tw_blob *)arr;
    }
    /* The string cannot decode to more than the rest of the document. */
    cap = avail / 4 * 3;
    dst = (uint8_t *)tw_mem_alloc(cap);
    if (!dst)
        return tws_string(s, end, simd, flags, e);
    n = tw_b64_decode_prefix((const char *)s, avail, dst, d->b64_path);
    /* The prefix is alphabet characters only: flags of the rest are those
       of the whole string. */
    q = tws_string(s + n, end, simd, flags, e);
    if (q && n && !*flags) {
        got = tw_b64_decode((const char *)(s + n), (size_t)(q - (s + n)),
                            dst + n / 4 * 3, cap - n / 4 * 3, d->b64_path,
                            NULL);
        if (got >= 0) {
            total = n / 4 * 3 + (size_t)got;
            /* tw_mem keeps a block that is at least half used, and moves
               the bytes to a fitting one otherwise. */
            uint8_t *fit = (uint8_t *)tw_mem_realloc(dst, total);
            if (fit)
                dst = fit;
            d->blobs[d->nblobs].data = dst;
            d->blobs[d->nblobs].len = total;
            *blob = (uint16_t)++d->nblobs;
            return q;
        }
    }
    tw_mem_free(dst);
    return q;
}

/* A choice object certain to fail validation (see "Choice records"). */
static int tws_choice_fails(const tw_doc *d, const tw_choice *c)
{
    if (d->sglang)
        return c->f[TW_F_SGL_IDS].type != TW_T_ARRAY &&
               c->f[TW_F_SGL_TRIPLES].type != TW_T_ARRAY;
    if (c->f[TW_F_TOKEN_IDS].type == TW_T_ARRAY)
        return 0;
    if (!d->openai)
        return 1;
    return c->f[TW_F_RAW_OUTPUT].type != TW_T_OBJECT &&
           c->f[TW_F_LOGPROBS_CONTENT].type != TW_T_ARRAY &&
           c->f[TW_F_LP_TOKENS].type != TW_T_ARRAY &&
           c->f[TW_F_LP_TOKEN_IDS].type != TW_T_ARRAY;
}

#define TWS_FAIL(at, message)                  \
    do {                                       \
        d->err_pos = (size_t)((at) - b);       \
        d->err_msg = (message);                \
        rc = TW_ERR_SYNTAX;                    \
        goto out;                              \
    } while (0)
#define TWS_FAIL_E() TWS_FAIL(err.pos, err.msg)
#define TWS_FAIL_END() TWS_FAIL(end, TWS_MSG_END)
#define TWS_NOMEM()                            \
    do {                                       \
        d->err_pos = (size_t)(p - b);          \
        d->err_msg = "out of memory";          \
        rc = TW_ERR_NOMEM;                     \
        goto out;                              \
    } while (0)
#define TWS_SKIP_WS()                          \
    while (p < end && tws_ws(*p))              \
    p++

int tw_scan(const char *buf, size_t len, tw_doc *d)
{
    const uint8_t *const b = (const uint8_t *)buf;
    const uint8_t *const end = b + len;
    const uint8_t *p = b, *q;
    /* the resolved SIMD path, 0 on the scalar one: a flag to the byte searches, the path to
       the integer runs' block reader */
    const int rpath = tw_path_resolve(d->path);
    const int simd = rpath != TW_PATH_SCALAR ? rpath : 0;
    /* The caller's blank_fields, as record-target bits. */
    const uint64_t extra = (d->blank_fields & ((UINT64_C(1) << TW_NFIELDS) - 1)) << TWS_T_F0;
    const uint64_t blank_str = (d->openai || d->sglang ? TWS_BLANK_STR_OPENAI : TWS_BLANK_STR) | extra;
    const uint64_t blank_arr =
        (d->sglang   ? 0
         : d->openai ? TWS_BLANK_ARR_OPENAI
                     : TWS_BLANK_ARR) | extra;
    const uint64_t b64 = d->openai || d->sglang ? TWS_B64_OPENAI : TWS_B64;
    const int decode = d->decode && b64;
    const size_t maxd = d->max_depth;
    tws_frame *st = (tws_frame *)d->stack, *top = NULL;
    size_t depth = 0, pci = 0;
    unsigned ptgt = TWS_T_NONE, pobj = TWS_C_TOP, parr = TWS_C_NONE;
    unsigned flags = 0;
    int rc = TW_OK, is_int = 0, choices_done = 0;
    tws_err err = {NULL, NULL};
    tw_value *v;
    uint8_t c;

    tws_free_blobs(d);
    d->nuints = 0;
    d->nentries = 0;
    d->top_is_object = 0;
    memset(d->root, 0, sizeof d->root);
    d->nchoices = 0;
    d->nblank = 0;
    d->blank_bytes = 0;
    d->err_pos = 0;
    d->err_msg = NULL;

    if (len == 0)
        TWS_FAIL(p, "empty document");
    if (len >= 3 && b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF)
        TWS_FAIL(p, "UTF-8 byte order mark is not allowed");
    if (d->sglang) {
        /* the root is an item, or an array of them */
        TWS_SKIP_WS();
        pobj = TWS_C_SGL_ITEM;
        parr = TWS_C_SGL_ITEMS;
        if (p < end && *p != '[' && tws_add_choice(d, *p == '{'))
            TWS_NOMEM(); /* a root that is not an array is item 0 (maybe not an object) */
    }

value: /* a value is expected (pending target/contexts set) */
    TWS_SKIP_WS();
    if (p == end)
        TWS_FAIL_END();
value_nows:
    c = *p;
    switch (c) {
    case '{':
    case '[':
        if (maxd && depth >= maxd)
            TWS_FAIL(p, "nesting too deep");
        if (depth == d->stack_cap) {
            void *arr = st;
            if (tw_doc_grow(&arr, &d->stack_cap, depth, sizeof(tws_frame), 32))
                TWS_NOMEM();
            st = (tws_frame *)arr;
            d->stack = arr;
        }
        top = &st[depth++];
        top->start = (size_t)(p - b);
        top->count = 0;
        top->ci = pci;
        top->tgt = (uint8_t)ptgt;
        top->all_int = 1;
        top->is_obj = c == '{';
        top->ctx = (uint8_t)(c == '{' ? pobj : parr);
        if (ptgt) {
            v = tws_slot(d, ptgt, pci);
            v->present = 1;
            v->type = c == '{' ? TW_T_OBJECT : TW_T_ARRAY;
            v->start = (size_t)(p - b);
        }
        if (depth == 1 && c == '{')
            d->top_is_object = 1;
        p++;
        TWS_SKIP_WS();
        if (p == end)
            TWS_FAIL_END();
        if (c == '{') {
            if (*p == '}') {
                p++;
                goto close;
            }
            goto key;
        }
        if (*p == ']') {
            p++;
            goto close;
        }
        /* Arrays read whole while they are scanned, their elements needing no other look: id
           and offset arrays (tws_uint_run), a sampling_mask list (tws_nested_run), and the
           entries of a record array, which the reader validates as this loop would (an
           entry's object, its candidates array, a candidate's object and an array in that
           are at most 4 levels below the array) or leaves to it. */
        {
            size_t n = 0, at = d->nuints;
            int nomem = 0, elements_int = 0;
            q = NULL;
            if (TWS_UINTS & TWS_BIT(ptgt)) {
                q = tws_uint_run(d, p, end, &n, &nomem, simd);
                elements_int = 1;
            } else if ((TWS_READ_MASK & TWS_BIT(ptgt)) && *p == '[' && (!maxd || maxd - depth >= 1)) {
                q = tws_nested_run(d, p, end, &n, &nomem, simd);
            } else if ((TWS_READ_RECORDS & TWS_BIT(ptgt)) && d->content_reader && !d->openai &&
                       !d->sglang && (!maxd || maxd - depth >= 4)) {
                at = d->nentries;
                q = d->content_reader(d, p, end, simd, &n);
            }
            if (nomem)
                TWS_NOMEM();
            if (q) {
                v = tws_slot(d, ptgt, pci);
                v->read = 1;
                v->read_at = at;
                top->count = n;
                if (!elements_int)
                    top->all_int = 0; /* its elements are arrays or objects */
                p = q;
                goto close;
            }
        }
        goto element;
    case '"': {
        uint16_t blob = 0;
        if (ptgt && decode && (b64 & TWS_BIT(ptgt)))
            q = tws_string_b64(d, p + 1, end, simd, &flags, &err, &blob);
        else
            q = tws_string(p + 1, end, simd, &flags, &err);
        if (!q)
            TWS_FAIL_E();
        if (ptgt) {
            v = tws_slot(d, ptgt, pci);
            v->present = 1;
            v->type = TW_T_STRING;
            v->blob = blob;
            v->start = (size_t)(p + 1 - b);
            v->end = (size_t)(q - b);
            v->has_escape = (flags & TWS_STR_ESCAPE) != 0;
            v->ascii = (flags & TWS_STR_NONASCII) == 0;
            if ((blank_str & TWS_BIT(ptgt)) && tws_add_blank(d, v->start, v->end))
                TWS_NOMEM();
        }
        p = q + 1;
        goto after_nonint;
    }
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9':
        q = tws_number(p, end, simd, &is_int, &err);
        if (!q)
            TWS_FAIL_E();
        if (ptgt) {
            v = tws_slot(d, ptgt, pci);
            v->present = 1;
            v->type = TW_T_NUMBER;
            v->start = (size_t)(p - b);
            v->end = (size_t)(q - b);
        }
        p = q;
        if (is_int)
            goto after;
        goto after_nonint;
    case 't':
    case 'f':
    case 'n': {
        const char *word = c == 't' ? "true" : c == 'f' ? "false" : "null";
        size_t n = c == 'f' ? 5 : 4;
        if ((size_t)(end - p) < n || memcmp(p, word, n) != 0) {
            for (size_t i = 1; i < n; i++)
                if (p + i == end)
                    TWS_FAIL_END();
                else if (p[i] != (uint8_t)word[i])
                    TWS_FAIL(p + i, "invalid literal");
        }
        if (ptgt) {
            v = tws_slot(d, ptgt, pci);
            v->present = 1;
            v->type = c == 't' ? TW_T_TRUE : c == 'f' ? TW_T_FALSE : TW_T_NULL;
            v->start = (size_t)(p - b);
            v->end = (size_t)(p + n - b);
        }
        p += n;
        goto after_nonint;
    }
    default:
        TWS_FAIL(p, "unexpected character, expected a JSON value");
    }

after_nonint: /* a value that is not an integer literal ended */
    if (top && !top->is_obj)
        top->all_int = 0;
after: /* a value ended */
    if (!top)
        goto done;
    TWS_SKIP_WS();
    if (p == end)
        TWS_FAIL_END();
    if (top->is_obj) {
        if (*p == ',') {
            p++;
            TWS_SKIP_WS();
            if (p == end)
                TWS_FAIL_END();
            if (*p == '}')
                TWS_FAIL(p, "trailing comma is not allowed");
            goto key;
        }
        if (*p == '}') {
            p++;
            goto close;
        }
        TWS_FAIL(p, "unexpected character, expected ',' or '}'");
    }
    if (*p == ',') {
        p++;
        TWS_SKIP_WS();
        if (p == end)
            TWS_FAIL_END();
        if (*p == ']')
            TWS_FAIL(p, "trailing comma is not allowed");
        goto element;
    }
    if (*p == ']') {
        p++;
        goto close;
    }
    TWS_FAIL(p, "unexpected character, expected ',' or ']'");

close: /* p is just past the closing bracket of top */
    if (top->tgt) {
        v = tws_slot(d, top->tgt, top->ci);
        v->end = (size_t)(p - b);
        if (!top->is_obj) {
            v->count = top->count;
            v->all_int = top->all_int;
            if ((blank_arr & TWS_BIT(top->tgt)) &&
                tws_add_blank(d, v->start + 1, v->end - 1))
                TWS_NOMEM();
        }
    }
    if ((top->ctx == TWS_C_CHOICE || top->ctx == TWS_C_SGL_ITEM) &&
        tws_choice_fails(d, &d->choice[top->ci]))
        choices_done = 1; /* this choice fails validation: stop recording */
    depth--;
    top = depth ? &st[depth - 1] : NULL;
    goto after_nonint;

element: /* p at the first byte of an array element */
    top->count++;
    ptgt = TWS_T_NONE;
    pobj = parr = TWS_C_NONE;
    if ((top->ctx == TWS_C_CHOICES || top->ctx == TWS_C_SGL_ITEMS) && !choices_done) {
        if (tws_add_choice(d, *p == '{'))
            TWS_NOMEM();
        if (*p == '{') {
            pobj = top->ctx == TWS_C_CHOICES ? TWS_C_CHOICE : TWS_C_SGL_ITEM;
            pci = d->nchoices - 1;
        } else {
            choices_done = 1; /* a non-object choice fails validation */
        }
    }
    goto value_nows;

key: /* p at the first byte of an object key */
    if (*p != '"')
        TWS_FAIL(p, "unexpected character, expected a string key");
    q = tws_string(p + 1, end, simd, &flags, &err);
    if (!q)
        TWS_FAIL_E();
    ptgt = TWS_T_NONE;
    pobj = parr = TWS_C_NONE;
    if (top->ctx != TWS_C_NONE) {
        const tws_rule *r = tws_match(top->ctx, p + 1, q, flags);
        if (r) {
            ptgt = r->tgt;
            pobj = r->ctx_obj;
            parr = r->ctx_arr;
            pci = top->ci;
            if (ptgt && ptgt < TWS_T_F0) {
                memset(tws_slot(d, ptgt, 0), 0, sizeof(tw_value));
                if (ptgt == TWS_T_CHOICES) {
                    d->nchoices = 0;
                    choices_done = 0;
                }
            } else {
                for (uint64_t m = r->clear; m; m &= m - 1) /* each bit set */
                    memset(&d->choice[pci].f[tw_ctz64(m)], 0, sizeof(tw_value));
            }
            for (unsigned t = 1; r->clear_root && t < TWS_T_F0; t++)
                if (r->clear_root & TWS_BIT(t))
                    memset(tws_slot(d, t, 0), 0, sizeof(tw_value));
        }
    }
    p = q + 1;
    TWS_SKIP_WS();
    if (p == end)
        TWS_FAIL_END();
    if (*p != ':')
        TWS_FAIL(p, "unexpected character, expected ':' after key");
    p++;
    goto value;

done:
    TWS_SKIP_WS();
    if (p != end)
        TWS_FAIL(p, "unexpected content after document");
out:
    d->stack = st;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* One string or number, for the record readers (tw_records.c)               */
/* ------------------------------------------------------------------------ */

const uint8_t *tw_scan_string(const uint8_t *p, const uint8_t *end, int simd,
                              unsigned *flags)
{
    tws_err e;
    return tws_string(p, end, simd, flags, &e);
}

const uint8_t *tw_scan_number(const uint8_t *p, const uint8_t *end, int simd, int *is_int)
{
    tws_err e;
    return tws_number(p, end, simd, is_int, &e);
}
