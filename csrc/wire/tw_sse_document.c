/*
 * tw_sse_document: the non-streamed document a stream reader stands for (tw_sse.h,
 * tw_sse_document), written out once the whole body was fed: the root fields kept, each
 * choice's concatenated ids, records and text, its once-sent fields.
 */
#include "wire/tw_sse_internal.h"

static const char *const LAST_ONLY[] = {"routed_experts", "sampling_mask", "kept_tokens", "weight_versions",
                                        "sampling_mask_logprobs"};

typedef struct {
    char *out;
    size_t n;
} writer;

static void w(writer *x, const void *p, size_t n)
{
    if (x->out && n)
        memcpy(x->out + x->n, p, n);
    x->n += n;
}

static void ws_lit(writer *x, const char *lit) { w(x, lit, strlen(lit)); }

static void w_key(writer *x, const char *store, const tw_sse_field *f)
{
    w(x, "\"", 1);
    w(x, store + f->key, f->key_len);
    w(x, "\":", 2);
    w(x, store + f->val, f->val_len);
}

size_t tw_sse_document(const tw_sse *s, char *out)
{
    writer x = {out, 0};
    size_t i, k, r;
    int first = 1;
    for (i = 0; i < s->pending.n; i++)
        if (!py_space((uint8_t)s->pending.p[i]))
            return 0;
    if (!s->done)
        return 0;
    for (i = 0; i < s->nchoices; i++) {
        const tw_sse_choice *c = &s->choices[i];
        for (k = 0; k < sizeof LAST_ONLY / sizeof *LAST_ONLY; k++) {
            span key = {(const uint8_t *)LAST_ONLY[k], strlen(LAST_ONLY[k])};
            const tw_sse_field *f = find(c->once, c->nonce, c->store.p, key);
            if (f && f->event != c->last_event)
                return 0;
        }
    }
    w(&x, "{", 1);
    if (s->form == TW_SSE_COMPLETIONS) {
        ws_lit(&x, "\"object\":\"text_completion\"");
        first = 0;
    } else if (s->form == TW_SSE_CHAT) {
        ws_lit(&x, "\"object\":\"chat.completion\"");
        first = 0;
    }
    for (i = 0; i < s->nroot; i++) {
        const tw_sse_field *f = &s->root[i];
        if (f->key_len == 6 && memcmp(s->root_store.p + f->key, "object", 6) == 0)
            continue;
        if (!first)
            w(&x, ",", 1);
        first = 0;
        w_key(&x, s->root_store.p, f);
    }
    if (s->prompt.n) {
        if (!first)
            w(&x, ",", 1);
        first = 0;
        ws_lit(&x, "\"prompt_token_ids\":");
        w(&x, s->prompt.p, s->prompt.n);
    }
    if (!first)
        w(&x, ",", 1);
    ws_lit(&x, "\"choices\":[");
    for (i = 0; i < s->nchoices; i++) {
        const tw_sse_choice *c = &s->choices[i];
        char num[24];
        size_t nn = 0;
        int64_t v = c->index;
        char tmp[24];
        do {
            tmp[nn++] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        for (k = 0; k < nn; k++)
            num[k] = tmp[nn - 1 - k];
        if (i)
            w(&x, ",", 1);
        ws_lit(&x, "{\"index\":");
        w(&x, num, nn);
        if (s->form == TW_SSE_CHAT) {
            ws_lit(&x, ",\"message\":{\"role\":");
            if (c->role.n)
                w(&x, c->role.p, c->role.n);
            else
                ws_lit(&x, "\"assistant\"");
            ws_lit(&x, ",\"content\":\"");
            w(&x, c->text.p, c->text.n);
            ws_lit(&x, "\"}");
        } else if (s->form == TW_SSE_COMPLETIONS) {
            ws_lit(&x, ",\"text\":\"");
            w(&x, c->text.p, c->text.n);
            ws_lit(&x, "\"");
        }
        if (c->has_records == 1) {
            if (s->form == TW_SSE_COMPLETIONS) {
                ws_lit(&x, ",\"logprobs\":{");
                for (r = 0; r < TW_SSE_RECORDS; r++) {
                    if (r)
                        w(&x, ",", 1);
                    w(&x, "\"", 1);
                    ws_lit(&x, tw_sse_rec_keys[r]);
                    ws_lit(&x, "\":[");
                    w(&x, c->rec[r].p, c->rec[r].n);
                    w(&x, "]", 1);
                }
                w(&x, "}", 1);
            } else {
                ws_lit(&x, ",\"logprobs\":{\"content\":[");
                w(&x, c->rec[0].p, c->rec[0].n);
                ws_lit(&x, "]}");
            }
        } else {
            ws_lit(&x, ",\"logprobs\":null");
        }
        ws_lit(&x, ",\"finish_reason\":");
        if (c->finish.n)
            w(&x, c->finish.p, c->finish.n);
        else
            ws_lit(&x, "null");
        if (c->stop.n) {
            ws_lit(&x, ",\"stop_reason\":");
            w(&x, c->stop.p, c->stop.n);
        }
        if (c->sent_ids) { /* none sent: none written (the parser then asks for ids) */
            ws_lit(&x, ",\"token_ids\":[");
            w(&x, c->ids.p, c->ids.n);
            w(&x, "]", 1);
        }
        if (c->prompt.n) {
            ws_lit(&x, ",\"prompt_token_ids\":");
            w(&x, c->prompt.p, c->prompt.n);
        }
        for (k = 0; k < c->nonce; k++) {
            w(&x, ",", 1);
            w_key(&x, c->store.p, &c->once[k]);
        }
        w(&x, "}", 1);
    }
    w(&x, "]", 1);
    if (s->usage.n) {
        ws_lit(&x, ",\"usage\":");
        w(&x, s->usage.p, s->usage.n);
    }
    w(&x, "}", 1);
    return x.n;
}
