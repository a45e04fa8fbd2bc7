/*
 * emu_regions.c - simulated Azure regions: parsing --regions, the write
 * region, the account's location lists (see emu_regions.h).
 */
#include "common/sf_base.h"

#include <ctype.h>
#include <stdatomic.h>

#include "common/sf_json.h"
#include "common/sf_parse.h"
#include "emulator/emu_regions.h"

struct emu_region {
    char name[EMU_REGION_NAME_MAX + 1];
    char host[128]; /* as given, without brackets */
    int port;
    char url[200]; /* "http://host:port/" once emu_regions_set_port ran */
    atomic_ullong requests;
    atomic_ullong refused;
};

struct emu_regions {
    int n;
    atomic_int write; /* index of the write region */
    struct emu_region r[EMU_REGIONS_MAX];
};

/* Compares region names as the JS SDK's normalizeEndpoint does: no white space, lower case. */
static bool name_eq(const char *a, const char *b)
{
    for (;;) {
        while (isspace((unsigned char)*a))
            a++;
        while (isspace((unsigned char)*b))
            b++;
        if (!*a || !*b)
            return !*a && !*b;
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return false;
        a++;
        b++;
    }
}

/* The URL a region advertises; [] around IPv6 hosts. */
static void region_url(struct emu_region *r, bool tls)
{
    bool v6 = strchr(r->host, ':') != NULL;
    char url[sizeof(r->url)];

    /* Formatted apart: r->host and r->url share the struct, which snprintf's restrict forbids. */
    snprintf(url, sizeof(url), "%s://%s%s%s:%d/", tls ? "https" : "http", v6 ? "[" : "", r->host,
             v6 ? "]" : "", r->port);
    memcpy(r->url, url, sizeof(url));
}

/* Parses one "NAME=HOST:PORT" of len bytes into *r. */
static enum sf_rc parse_one(const char *s, size_t len, struct emu_region *r, struct sf_err *err)
{
    const char *eq = memchr(s, '=', len), *addr, *end = s + len, *colon;
    size_t nlen, hlen;
    int64_t port;

    if (!eq)
        return sf_err_set(err, SF_EINVAL, false, "--regions entry '%.*s': expected NAME=HOST:PORT",
                          (int)len, s);
    nlen = (size_t)(eq - s);
    while (nlen > 0 && isspace((unsigned char)s[0])) {
        s++;
        nlen--;
    }
    while (nlen > 0 && isspace((unsigned char)s[nlen - 1]))
        nlen--;
    if (nlen == 0 || nlen > EMU_REGION_NAME_MAX)
        return sf_err_set(err, SF_EINVAL, false,
                          "--regions entry '%.*s': the region name must be 1..%d bytes",
                          (int)(end - s), s, EMU_REGION_NAME_MAX);
    for (size_t i = 0; i < nlen; i++) {
        if (!isprint((unsigned char)s[i]) || s[i] == '"' || s[i] == '\\')
            return sf_err_set(err, SF_EINVAL, false,
                              "--regions entry '%.*s': the region name may hold printable "
                              "characters only (no quotes or backslashes)",
                              (int)(end - s), s);
    }
    memcpy(r->name, s, nlen);
    r->name[nlen] = '\0';
    addr = eq + 1;
    if (addr < end && *addr == '[') {
        const char *close = memchr(addr, ']', (size_t)(end - addr));
        if (!close || close + 1 >= end || close[1] != ':')
            return sf_err_set(err, SF_EINVAL, false,
                              "--regions region '%s': expected [IPV6]:PORT after '='", r->name);
        hlen = (size_t)(close - addr - 1);
        addr++;
        colon = close + 1;
    } else {
        colon = NULL;
        for (const char *p = addr; p < end; p++)
            if (*p == ':')
                colon = p;
        if (!colon)
            return sf_err_set(err, SF_EINVAL, false,
                              "--regions region '%s': expected HOST:PORT after '='", r->name);
        hlen = (size_t)(colon - addr);
    }
    if (hlen == 0 || hlen >= sizeof(r->host))
        return sf_err_set(err, SF_EINVAL, false, "--regions region '%s': bad host", r->name);
    memcpy(r->host, addr, hlen);
    r->host[hlen] = '\0';
    if (strcmp(r->host, "localhost") == 0)
        snprintf(r->host, sizeof(r->host), "127.0.0.1");
    if (sf_parse_i64n(colon + 1, (size_t)(end - colon - 1), 0, 65535, &port) != SF_OK)
        return sf_err_set(err, SF_EINVAL, false, "--regions region '%s': port must be 0..65535",
                          r->name);
    r->port = (int)port;
    region_url(r, false);
    return SF_OK;
}

enum sf_rc emu_regions_parse(const char *spec, struct emu_regions **ret_regions, struct sf_err *err)
{
    struct emu_regions *g = calloc(1, sizeof(*g));
    const char *p = spec;
    enum sf_rc rc = SF_OK;

    if (!g)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        struct emu_region *r;

        if (g->n == EMU_REGIONS_MAX) {
            rc =
                sf_err_set(err, SF_EINVAL, false, "--regions: at most %d regions", EMU_REGIONS_MAX);
            goto out;
        }
        r = &g->r[g->n];
        if ((rc = parse_one(p, len, r, err)) != SF_OK)
            goto out;
        for (int i = 0; i < g->n; i++) {
            if (name_eq(g->r[i].name, r->name)) {
                rc = sf_err_set(err, SF_EINVAL, false,
                                "--regions: region '%s' is listed twice (names are compared "
                                "without spaces and case, as the SDKs do)",
                                r->name);
                goto out;
            }
            if (r->port != 0 && g->r[i].port == r->port && strcmp(g->r[i].host, r->host) == 0) {
                rc = sf_err_set(err, SF_EINVAL, false,
                                "--regions: regions '%s' and '%s' have the same address %s:%d",
                                g->r[i].name, r->name, r->host, r->port);
                goto out;
            }
        }
        g->n++;
        p += len;
        if (*p == ',')
            p++;
    }
    if (g->n == 0) {
        rc = sf_err_set(err, SF_EINVAL, false,
                        "--regions '%s': expected NAME=HOST:PORT[,NAME=HOST:PORT...]", spec);
        goto out;
    }
    atomic_init(&g->write, 0);
    *ret_regions = g;
    g = NULL;
out:
    free(g);
    return rc;
}

void emu_regions_free(struct emu_regions *g)
{
    free(g);
}

int emu_regions_count(const struct emu_regions *g)
{
    return g->n;
}

const char *emu_regions_name(const struct emu_regions *g, int i)
{
    return g->r[i].name;
}

const char *emu_regions_host(const struct emu_regions *g, int i)
{
    return g->r[i].host;
}

int emu_regions_port(const struct emu_regions *g, int i)
{
    return g->r[i].port;
}

void emu_regions_set_port(struct emu_regions *g, int i, int port, bool tls)
{
    g->r[i].port = port;
    region_url(&g->r[i], tls);
}

int emu_regions_write_index(const struct emu_regions *g)
{
    return atomic_load(&((struct emu_regions *)g)->write);
}

enum sf_rc emu_regions_failover(struct emu_regions *g, const char *name, struct sf_err *err)
{
    char known[EMU_REGIONS_MAX * (EMU_REGION_NAME_MAX + 4)];
    size_t off = 0;

    for (int i = 0; i < g->n; i++) {
        if (name_eq(g->r[i].name, name)) {
            atomic_store(&g->write, i);
            return SF_OK;
        }
    }
    known[0] = '\0';
    for (int i = 0; i < g->n && off < sizeof(known); i++)
        off += (size_t)snprintf(known + off, sizeof(known) - off, "%s'%s'", i ? ", " : "",
                                g->r[i].name);
    return sf_err_set(err, SF_ENOTFOUND, false, "No region '%s' (the regions are %s).", name,
                      known);
}

void emu_regions_count_request(struct emu_regions *g, int i, bool refused)
{
    atomic_fetch_add(&g->r[i].requests, 1);
    if (refused)
        atomic_fetch_add(&g->r[i].refused, 1);
}

static json_t *location(const struct emu_region *r)
{
    return json_pack("{s:s,s:s}", "name", r->name, "databaseAccountEndpoint", r->url);
}

json_t *emu_regions_locations(const struct emu_regions *g, bool writable)
{
    int w = emu_regions_write_index(g);
    json_t *arr = json_array();

    if (!arr || json_array_append_new(arr, location(&g->r[w])) != 0)
        goto fail;
    for (int i = 0; !writable && i < g->n; i++) {
        if (i != w && json_array_append_new(arr, location(&g->r[i])) != 0)
            goto fail;
    }
    return arr;
fail:
    json_decref(arr);
    return NULL;
}

enum sf_rc emu_regions_dump(const struct emu_regions *g, struct sf_buf *out)
{
    int w = emu_regions_write_index(g);
    json_t *list = json_array(), *doc = NULL;
    enum sf_rc rc = SF_ENOMEM;

    if (!list)
        goto out;
    for (int i = 0; i < g->n; i++) {
        const struct emu_region *r = &g->r[i];
        json_t *e = json_pack(
            "{s:s,s:s,s:b,s:I,s:I}", "name", r->name, "endpoint", r->url, "isWriteRegion", i == w,
            "requests", (json_int_t)atomic_load(&((struct emu_region *)r)->requests),
            "writesRefused", (json_int_t)atomic_load(&((struct emu_region *)r)->refused));
        if (json_array_append_new(list, e) != 0)
            goto out;
    }
    doc = json_pack("{s:s,s:O}", "writeRegion", g->r[w].name, "regions", list);
    if (doc)
        rc = sf_json_dump(doc, out);
out:
    json_decref(doc);
    json_decref(list);
    return rc;
}
