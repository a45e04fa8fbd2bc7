/*
 * fuzz_cosmos_response.c - libFuzzer target over everything the client
 * parses from a server: header lines, change-feed pages, batch results,
 * error bodies, pkranges, containers, query pages and session tokens.
 *
 * Input: one selector byte, then "header lines\n\nbody". Header lines go
 * through cosmos_response_header one by one (as libcurl delivers them), the
 * body into resp.body, then the parser(s) the selector names run over it.
 * Selector 5 instead feeds the raw bytes to the built-in HTTP/1.1 response
 * parser in pieces whose size also comes from the selector byte.
 * Every parser must return an error for bad input, never crash, leak or read
 * out of bounds. Built twice: as a libFuzzer binary (SF_FUZZ) and as a
 * corpus replayer run by ctest.
 */
#include "common/sf_base.h"

#include "cosmos/cosmos_http.h"
#include "cosmos/cosmos_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_BODY_MAX (1u << 20)

/* Feeds the header part, line by line, into resp. */
static void fuzz_headers(struct cosmos_response *resp, const char *p, size_t len)
{
    while (len > 0) {
        const char *nl = memchr(p, '\n', len);
        size_t n = nl != NULL ? (size_t)(nl - p) + 1 : len;

        (void)cosmos_response_header(resp, p, n, NULL);
        p += n;
        len -= n;
    }
}

static void fuzz_cf(const struct cosmos_response *resp)
{
    struct cosmos_cf_page page;

    cosmos_cf_page_init(&page);
    if (cosmos_cf_page_parse(resp, "0", &page, NULL) == SF_OK) {
        /* The page must be self-consistent. */
        if (page.items == NULL || json_array_size(page.items) != page.count)
            __builtin_trap();
        cosmos_cf_page_release(&page);
    }
}

static void fuzz_batch(const struct cosmos_response *resp)
{
    size_t n;

    for (n = 0; n < 4; n++) {
        struct cosmos_batch_result res;

        cosmos_batch_result_init(&res);
        if (cosmos_batch_result_parse(resp->status != 0 ? resp->status : 207, resp->body.data,
                                      resp->body.len, n, &res, NULL) == SF_OK) {
            if (res.n != n || (res.committed && res.first_failure >= 0))
                __builtin_trap();
            cosmos_batch_result_release(&res);
        }
    }
}

static void fuzz_pkranges(const struct cosmos_response *resp)
{
    static const char *const epks[] = {"", "00", "3F", "7F", "FE", "FF", "ZZ"};
    struct cosmos_pkranges *r = NULL;
    size_t i;

    if (cosmos_pkranges_parse(resp->body.data, resp->body.len, resp->etag, &r, NULL) != SF_OK)
        return;
    for (i = 0; i < SF_ARRAY_LEN(epks); i++) {
        long k = cosmos_pkranges_find(r, epks[i]);

        if (k >= (long)r->n)
            __builtin_trap();
    }
    free(r);
}

static void fuzz_misc(const struct cosmos_response *resp)
{
    struct cosmos_container_info info;
    char code[48], msg[256];
    json_t *docs = NULL, *v;
    int64_t lsn;

    cosmos_error_body(resp->body.data, resp->body.len, code, sizeof(code), msg, sizeof(msg));
    (void)cosmos_container_parse(resp->body.data, resp->body.len, &info, NULL);
    if (cosmos_query_page_parse(resp->body.data, resp->body.len, &docs, NULL) == SF_OK)
        json_decref(docs);
    (void)cosmos_session_token_lsn(resp->body.data, resp->body.len, NULL, &lsn);
    (void)cosmos_session_token_lsn(resp->body.data, resp->body.len, "1", &lsn);
    if (resp->session_token.len > 0)
        (void)cosmos_session_token_lsn(resp->session_token.data, resp->session_token.len, "0",
                                       &lsn);
    v = cosmos_response_json(resp, NULL);
    json_decref(v);
    /* What confirms a success: never crashes, whatever came instead. */
    (void)cosmos_confirm_doc(resp, false, NULL);
    (void)cosmos_confirm_doc(resp, true, NULL);
    (void)cosmos_confirm_no_doc(resp, NULL);
    (void)cosmos_confirm_object(resp, NULL);
}

/* The raw bytes as an HTTP response, in pieces of `step` bytes. */
static void fuzz_http(const char *p, size_t len, size_t step, bool no_body)
{
    struct cosmos_response resp;
    struct cosmos_http_parser hp;
    size_t off = 0;

    cosmos_response_init(&resp, 64u << 10);
    cosmos_http_parser_init(&hp, no_body);
    while (off < len && !cosmos_http_done(&hp)) {
        size_t n = SF_MIN(step, len - off), used = 0;

        if (cosmos_http_parse(&hp, &resp, p + off, n, &used, NULL) != SF_OK)
            break;
        if (used > n || (used < n && !cosmos_http_done(&hp)))
            __builtin_trap();
        off += n;
    }
    if (off >= len)
        (void)cosmos_http_parse_eof(&hp, NULL);
    if (resp.body.len > resp.body.max)
        __builtin_trap();
    cosmos_http_parser_release(&hp);
    cosmos_response_release(&resp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cosmos_response resp;
    const char *p = (const char *)data + 1, *split;
    size_t len, hlen;
    unsigned sel;

    if (size < 1)
        return 0;
    sel = data[0] % 6;
    len = size - 1;
    if (sel == 5) {
        fuzz_http(p, len, (size_t)(data[0] / 6 % 40) + 1, data[0] >= 240);
        return 0;
    }
    split = memmem(p, len, "\n\n", 2);
    hlen = split != NULL ? (size_t)(split - p) + 1 : len;
    cosmos_response_init(&resp, FUZZ_BODY_MAX);
    fuzz_headers(&resp, p, hlen);
    if (split != NULL)
        (void)sf_buf_append(&resp.body, split + 2, len - hlen - 1);
    switch (sel) {
    case 0:
        fuzz_cf(&resp);
        break;
    case 1:
        fuzz_batch(&resp);
        break;
    case 2:
        fuzz_pkranges(&resp);
        break;
    case 3:
        fuzz_misc(&resp);
        break;
    default:
        fuzz_cf(&resp);
        fuzz_batch(&resp);
        fuzz_pkranges(&resp);
        fuzz_misc(&resp);
        break;
    }
    cosmos_response_release(&resp);
    return 0;
}
