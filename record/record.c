/*
 * record.c - the outbox record format: building it (saga engine),
 * reading it back (relay), event ids, topic names and message keys. record.h
 * documents the format; this file is the only code that knows its field names.
 */
#include "common/sf_base.h"

#include "common/sf_crypto.h"
#include "common/sf_json.h"
#include "common/sf_time.h"
#include "record/record.h"

/* Fields of the record itself: a partition key path may not start with one of these. */
static const char *const record_fields[] = {
    "id",       "type",      "eventType", "topic",       "sagaId",
    "workflow", "epoch",     "payload",   "traceparent", "ttl",
    "sourceId", "sourceLsn", "sourceSeq", "createdAt",   OUTBOX_SYS_FIELD,
};

#define PK_PATH_MAX    256
#define PK_DEPTH_MAX   8
#define HASH_ID_PREFIX "ob:h:"

/* An entry of the all-versions-and-deletes feed: {current?, previous?, metadata}, no id. */
static bool is_all_versions_entry(const json_t *doc)
{
    return json_is_object(json_object_get(doc, "metadata")) && json_object_get(doc, "id") == NULL;
}

static bool has_kind(const json_t *doc)
{
    return json_is_object(doc) && json_object_get(doc, OUTBOX_SYS_FIELD) != NULL;
}

bool record_is_system(const json_t *doc)
{
    if (!json_is_object(doc))
        return false;
    if (is_all_versions_entry(doc))
        return has_kind(json_object_get(doc, "current")) ||
               has_kind(json_object_get(doc, "previous"));
    return has_kind(doc);
}

bool outbox_topic_valid(const char *topic)
{
    size_t i, n;

    if (topic == NULL)
        return false;
    n = strlen(topic);
    if (n == 0 || n > OUTBOX_NAME_MAX || strcmp(topic, ".") == 0 || strcmp(topic, "..") == 0)
        return false;
    for (i = 0; i < n; i++) {
        char c = topic[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

/* A character that Cosmos DB ids must not contain, or our ':' separator. */
static bool id_char_bad(unsigned char c)
{
    return c == '/' || c == '\\' || c == '?' || c == '#' || c == ':' || c < 0x20 || c == 0x7f;
}

static bool id_part_plain(const char *s)
{
    for (; *s != '\0'; s++)
        if (id_char_bad((unsigned char)*s))
            return false;
    return true;
}

/* Appends a part with its length first, so the hashed text is unambiguous. */
static enum sf_rc hash_part(struct sf_buf *b, const char *s)
{
    return sf_buf_printf(b, "%zu:%s;", strlen(s), s);
}

enum sf_rc outbox_event_id(const char *workflow, const char *saga_id, const char *event_type,
                           const char *discriminator, char *out, size_t out_size,
                           struct sf_err *err)
{
    struct sf_buf b;
    unsigned char digest[32];
    char hex[65];
    const char *parts[4];
    size_t i, n_parts;
    bool plain = true;
    enum sf_rc rc;
    int n;

    if (workflow == NULL || *workflow == '\0')
        return sf_err_set(err, SF_EINVAL, false, "outbox event id: workflow is required");
    if (saga_id == NULL || *saga_id == '\0')
        return sf_err_set(err, SF_EINVAL, false, "outbox event id: saga id is required");
    if (event_type == NULL || *event_type == '\0')
        return sf_err_set(err, SF_EINVAL, false, "outbox event id: event type is required");
    if (out == NULL || out_size <= OUTBOX_EVENT_ID_MAX)
        return sf_err_set(err, SF_EINVAL, false, "outbox event id: output buffer too small");
    parts[0] = workflow;
    parts[1] = saga_id;
    parts[2] = event_type;
    parts[3] = discriminator;
    n_parts = discriminator != NULL && *discriminator != '\0' ? 4 : 3;
    for (i = 0; i < n_parts; i++)
        plain = plain && id_part_plain(parts[i]);

    if (plain) {
        n = snprintf(out, out_size, "ob:%s:%s:%s%s%s", workflow, saga_id, event_type,
                     n_parts == 4 ? ":" : "", n_parts == 4 ? discriminator : "");
        if (n > 0 && (size_t)n <= OUTBOX_EVENT_ID_MAX && out[n - 1] != ' ')
            return SF_OK;
    }
    /* Too long, or characters an id cannot hold: hash a length-prefixed form. */
    sf_buf_init(&b, 4 * (size_t)OUTBOX_FIELD_MAX + 256);
    rc = SF_OK;
    for (i = 0; i < n_parts && rc == SF_OK; i++)
        rc = hash_part(&b, parts[i]);
    if (rc != SF_OK) {
        sf_buf_release(&b);
        return sf_err_set(err, rc, false, "outbox event id: parts too long");
    }
    sf_sha256(b.data, b.len, digest);
    sf_buf_release(&b);
    sf_hex_lower(digest, sizeof(digest), hex);
    hex[64] = '\0';
    (void)snprintf(out, out_size, HASH_ID_PREFIX "%s", hex);
    return SF_OK;
}

/* W3C trace context: "vv-<32 hex>-<16 hex>-ff", lowercase; later versions may append "-...". */
bool outbox_traceparent_valid(const char *s)
{
    static const int hex_runs[] = {2, 32, 16, 2};
    const char *p = s;
    size_t i;
    int k;

    if (s == NULL)
        return false;
    for (i = 0; i < SF_ARRAY_LEN(hex_runs); i++) {
        for (k = 0; k < hex_runs[i]; k++, p++)
            if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
                return false;
        if (i + 1 < SF_ARRAY_LEN(hex_runs) && *p++ != '-')
            return false;
    }
    if (strncmp(s, "ff", 2) == 0)
        return false;
    if (*p == '\0')
        return true;
    return strncmp(s, "00", 2) != 0 && *p == '-' && strlen(s) <= OUTBOX_FIELD_MAX;
}

static enum sf_rc check_str(const char *what, const char *s, bool required, size_t max,
                            struct sf_err *err)
{
    if (s == NULL) {
        if (required)
            return sf_err_set(err, SF_EINVAL, false, "outbox record: %s is required", what);
        return SF_OK;
    }
    if (*s == '\0')
        return sf_err_set(err, SF_EINVAL, false, "outbox record: %s is empty", what);
    if (strlen(s) > max)
        return sf_err_set(err, SF_EINVAL, false, "outbox record: %s longer than %zu bytes", what,
                          max);
    return SF_OK;
}

/*
 * Splits pk_path ("/a/b") into segments inside buf (NULs replace the
 * slashes). Rejects empty segments, more than PK_DEPTH_MAX of them and a first
 * segment naming a record field or a system property.
 */
static enum sf_rc pk_path_split(const char *pk_path, char *buf, size_t buf_size,
                                const char **ret_segs, size_t *ret_n, struct sf_err *err)
{
    size_t i, n = 0, len;
    char *p;

    if (pk_path == NULL || pk_path[0] != '/')
        return sf_err_set(err, SF_EINVAL, false,
                          "outbox record: pk_path must look like \"/field\"");
    len = strlen(pk_path);
    if (len >= buf_size)
        return sf_err_set(err, SF_EINVAL, false, "outbox record: pk_path too long");
    memcpy(buf, pk_path + 1, len);
    p = buf;
    for (;;) {
        char *slash = strchr(p, '/');
        if (slash != NULL)
            *slash = '\0';
        if (*p == '\0')
            return sf_err_set(err, SF_EINVAL, false,
                              "outbox record: pk_path '%s' has an empty segment", pk_path);
        if (n == PK_DEPTH_MAX)
            return sf_err_set(err, SF_EINVAL, false, "outbox record: pk_path '%s' too deep",
                              pk_path);
        ret_segs[n++] = p;
        if (slash == NULL)
            break;
        p = slash + 1;
    }
    if (ret_segs[0][0] == '_')
        return sf_err_set(err, SF_EINVAL, false,
                          "outbox record: pk_path '%s' names a system property", pk_path);
    for (i = 0; i < SF_ARRAY_LEN(record_fields); i++)
        if (strcmp(ret_segs[0], record_fields[i]) == 0)
            return sf_err_set(err, SF_EINVAL, false,
                              "outbox record: partition key path '%s' collides with the "
                              "record's own \"%s\" field; such a container cannot hold "
                              "outbox records",
                              pk_path, record_fields[i]);
    *ret_n = n;
    return SF_OK;
}

/*
 * Sets doc[segs[0]][segs[1]]... = v (taking v), creating the objects on the
 * way (reusing those an earlier level of a hierarchical key made).
 */
static enum sf_rc set_nested(json_t *doc, const char *const *segs, size_t n, json_t *v)
{
    json_t *cur = doc;
    size_t i;

    for (i = 0; i + 1 < n; i++) {
        json_t *child = json_object_get(cur, segs[i]);

        if (!json_is_object(child) &&
            ((child = json_object()) == NULL || json_object_set_new(cur, segs[i], child) != 0)) {
            json_decref(v);
            return SF_ENOMEM;
        }
        cur = child;
    }
    return json_object_set_new(cur, segs[n - 1], v) == 0 ? SF_OK : SF_ENOMEM;
}

/* The levels a pk_path names: 1, or a hierarchical key's paths joined by ','. */
static size_t pk_levels(const char *pk_path)
{
    size_t n = 1;

    for (; pk_path != NULL && *pk_path != '\0'; pk_path++)
        n += *pk_path == ',';
    return n;
}

/*
 * Sets the partition key of rec into doc: the value at its path, or each
 * level of a hierarchical key at its own path ({} levels left absent, as in
 * the item). Paths are checked by pk_path_split.
 */
static enum sf_rc set_pk(json_t *doc, const struct outbox_record *rec, struct sf_err *err)
{
    char pathbuf[PK_PATH_MAX], one[PK_PATH_MAX];
    const char *segs[PK_DEPTH_MAX], *p = rec->pk_path;
    size_t n_segs = 0, n = pk_levels(rec->pk_path);
    enum sf_rc rc = SF_OK;

    for (size_t i = 0; i < n && rc == SF_OK; i++) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        const json_t *v = n == 1 ? rec->pk_value : json_array_get(rec->pk_value, i);

        if (len >= sizeof(one))
            return sf_err_set(err, SF_EINVAL, false, "outbox record: pk_path too long");
        memcpy(one, p, len);
        one[len] = '\0';
        p = end != NULL ? end + 1 : p + len;
        rc = pk_path_split(one, pathbuf, sizeof(pathbuf), segs, &n_segs, err);
        if (rc != SF_OK || rec->pk_undefined || (n > 1 && json_is_object(v)))
            continue;
        if (set_nested(doc, segs, n_segs, json_deep_copy(v)) != SF_OK)
            rc = sf_err_set(err, SF_ENOMEM, false, "out of memory");
    }
    return rc;
}

static enum sf_rc check_record(const struct outbox_record *rec, struct sf_err *err)
{
    enum sf_rc rc;

    if (rec == NULL)
        return sf_err_set(err, SF_EINVAL, false, "outbox record: NULL");
    if ((rc = check_str("event_type", rec->event_type, true, OUTBOX_FIELD_MAX, err)) != SF_OK ||
        (rc = check_str("saga_id", rec->saga_id, rec->id == NULL, OUTBOX_FIELD_MAX, err)) !=
            SF_OK ||
        (rc = check_str("workflow", rec->workflow, rec->id == NULL, OUTBOX_FIELD_MAX, err)) !=
            SF_OK ||
        (rc = check_str("id", rec->id, false, OUTBOX_EVENT_ID_MAX, err)) != SF_OK ||
        (rc = check_str("traceparent", rec->traceparent, false, OUTBOX_FIELD_MAX, err)) != SF_OK ||
        (rc = check_str("source_id", rec->source_id, false, OUTBOX_FIELD_MAX, err)) != SF_OK)
        return rc;
    if (rec->id != NULL) {
        const char *p;
        for (p = rec->id; *p != '\0'; p++)
            if (*p == '/' || *p == '\\' || *p == '?' || *p == '#')
                return sf_err_set(err, SF_EINVAL, false,
                                  "outbox record: id '%s' contains '%c', which Cosmos DB ids "
                                  "cannot hold",
                                  rec->id, *p);
    }
    if (rec->topic != NULL && !outbox_topic_valid(rec->topic))
        return sf_err_set(err, SF_EINVAL, false,
                          "outbox record: topic '%.64s' is not a valid Kafka topic name "
                          "(1..249 of [a-zA-Z0-9._-])",
                          rec->topic);
    if (rec->traceparent != NULL && !outbox_traceparent_valid(rec->traceparent))
        return sf_err_set(err, SF_EINVAL, false,
                          "outbox record: traceparent '%.64s' is not a W3C traceparent",
                          rec->traceparent);
    if (rec->pk_undefined && rec->pk_value != NULL)
        return sf_err_set(err, SF_EINVAL, false,
                          "outbox record: pk_value must be NULL when pk_undefined is set");
    if (rec->pk_value == NULL && !rec->pk_undefined)
        return sf_err_set(err, SF_EINVAL, false,
                          "outbox record: pk_value is required (pk_undefined for an item "
                          "without a partition key field)");
    if (rec->pk_value != NULL && pk_levels(rec->pk_path) > 1) {
        /* A hierarchical key: one value per level, {} for an undefined one. */
        size_t i;
        const json_t *v;

        if (!json_is_array(rec->pk_value) ||
            json_array_size(rec->pk_value) != pk_levels(rec->pk_path))
            return sf_err_set(err, SF_EINVAL, false,
                              "outbox record: pk_value must hold one value per level of the "
                              "hierarchical key %s",
                              rec->pk_path);
        json_array_foreach(rec->pk_value, i, v)
        {
            if (json_is_array(v) || (json_is_object(v) && json_object_size(v) > 0))
                return sf_err_set(err, SF_EINVAL, false,
                                  "outbox record: pk_value[%zu] must be a string, number, bool "
                                  "or null",
                                  i);
        }
    } else if (rec->pk_value != NULL &&
               (json_is_object(rec->pk_value) || json_is_array(rec->pk_value))) {
        return sf_err_set(err, SF_EINVAL, false,
                          "outbox record: pk_value must be a string, number, bool or null");
    }
    if (rec->payload == NULL)
        return sf_err_set(err, SF_EINVAL, false, "outbox record: payload is required");
    if (rec->ttl_s < -1)
        return sf_err_set(err, SF_EINVAL, false, "outbox record: ttl_s must be -1, 0 or positive");
    return SF_OK;
}

enum sf_rc outbox_record_build(const struct outbox_record *rec, json_t **ret_doc,
                               struct sf_err *err)
{
    char idbuf[OUTBOX_EVENT_ID_MAX + 1];
    const char *id;
    json_t *doc = NULL, *payload;
    enum sf_rc rc;
    int bad = 0;

    if ((rc = check_record(rec, err)) != SF_OK)
        return rc;
    if (rec->pk_path == NULL || rec->pk_path[0] != '/')
        return sf_err_set(err, SF_EINVAL, false,
                          "outbox record: pk_path must look like \"/field\"");
    id = rec->id;
    if (id == NULL) {
        rc = outbox_event_id(rec->workflow, rec->saga_id, rec->event_type, rec->discriminator,
                             idbuf, sizeof(idbuf), err);
        if (rc != SF_OK)
            return rc;
        id = idbuf;
    }

    doc = json_object();
    if (doc == NULL)
        goto oom;
    bad |= json_object_set_new(doc, "id", json_string(id));
    bad |= json_object_set_new(doc, "type", json_string(OUTBOX_RECORD_TYPE));
    bad |= json_object_set_new(doc, OUTBOX_SYS_FIELD, json_string(OUTBOX_SYS_KIND));
    if (bad != 0)
        goto oom;
    /*
     * The partition key comes right after, where a reader of the document
     * expects it; an undefined key stays absent, as in the item, so Cosmos
     * DB puts the record in the item's (undefined) partition.
     */
    if ((rc = set_pk(doc, rec, err)) != SF_OK) {
        json_decref(doc);
        return rc;
    }
    bad |= json_object_set_new(doc, "eventType", json_string(rec->event_type));
    if (rec->topic != NULL)
        bad |= json_object_set_new(doc, "topic", json_string(rec->topic));
    if (rec->saga_id != NULL)
        bad |= json_object_set_new(doc, "sagaId", json_string(rec->saga_id));
    if (rec->workflow != NULL)
        bad |= json_object_set_new(doc, "workflow", json_string(rec->workflow));
    if (rec->epoch >= 0)
        bad |= json_object_set_new(doc, "epoch", json_integer(rec->epoch));
    payload = json_deep_copy(rec->payload);
    bad |= json_object_set_new(doc, "payload", payload);
    if (rec->traceparent != NULL)
        bad |= json_object_set_new(doc, "traceparent", json_string(rec->traceparent));
    if (rec->source_id != NULL)
        bad |= json_object_set_new(doc, "sourceId", json_string(rec->source_id));
    if (rec->source_lsn > 0)
        bad |= json_object_set_new(doc, "sourceLsn", json_integer(rec->source_lsn));
    if (rec->source_seq > 0)
        bad |= json_object_set_new(doc, "sourceSeq", json_integer(rec->source_seq));
    if (rec->created_at_ms > 0) {
        char at[32];

        sf_time_iso8601(rec->created_at_ms, at);
        bad |= json_object_set_new(doc, "createdAt", json_string(at));
    }
    if (rec->ttl_s >= 0)
        bad |= json_object_set_new(
            doc, "ttl", json_integer(rec->ttl_s == 0 ? OUTBOX_DEFAULT_TTL_S : rec->ttl_s));
    if (bad != 0)
        goto oom;
    *ret_doc = doc;
    return SF_OK;
oom:
    json_decref(doc);
    return sf_err_set(err, SF_ENOMEM, true, "outbox record: out of memory");
}

enum sf_rc outbox_record_build_text(const struct outbox_record *rec, struct sf_buf *out,
                                    struct sf_err *err)
{
    json_t *doc = NULL;
    enum sf_rc rc;

    rc = outbox_record_build(rec, &doc, err);
    if (rc != SF_OK)
        return rc;
    rc = sf_json_dump(doc, out);
    json_decref(doc);
    if (rc != SF_OK)
        return sf_err_set(err, rc, false, "outbox record: cannot serialise: %s", sf_rc_str(rc));
    return SF_OK;
}

bool outbox_record_is(const json_t *doc)
{
    const char *type = sf_json_str(doc, "type");
    return type != NULL && strcmp(type, OUTBOX_RECORD_TYPE) == 0;
}

/* An optional string member: absent is fine, present must be a string within max bytes. */
static enum sf_rc read_opt_str(const json_t *doc, const char *key, size_t max, const char **ret_s,
                               struct sf_err *err)
{
    const json_t *v = json_object_get(doc, key);

    if (v == NULL || json_is_null(v)) {
        *ret_s = NULL;
        return SF_OK;
    }
    if (!json_is_string(v))
        return sf_err_set(err, SF_EINVAL, false, "outbox record: \"%s\" is not a string", key);
    if (json_string_length(v) == 0 || json_string_length(v) > max)
        return sf_err_set(err, SF_EINVAL, false, "outbox record: \"%s\" is empty or over %zu bytes",
                          key, max);
    *ret_s = json_string_value(v);
    return SF_OK;
}

enum sf_rc outbox_record_read(const json_t *doc, struct outbox_record_view *ret_view,
                              struct sf_err *err)
{
    struct outbox_record_view v;
    const json_t *epoch;
    enum sf_rc rc;

    if (!json_is_object(doc))
        return sf_err_set(err, SF_EINVAL, false, "outbox record: not a JSON object");
    if (!outbox_record_is(doc))
        return sf_err_set(err, SF_EINVAL, false, "outbox record: \"type\" is not \"%s\"",
                          OUTBOX_RECORD_TYPE);
    memset(&v, 0, sizeof(v));
    if ((rc = read_opt_str(doc, "id", OUTBOX_EVENT_ID_MAX, &v.id, err)) != SF_OK ||
        (rc = read_opt_str(doc, "eventType", OUTBOX_FIELD_MAX, &v.event_type, err)) != SF_OK ||
        (rc = read_opt_str(doc, "topic", OUTBOX_NAME_MAX, &v.topic, err)) != SF_OK ||
        (rc = read_opt_str(doc, "sagaId", OUTBOX_FIELD_MAX, &v.saga_id, err)) != SF_OK ||
        (rc = read_opt_str(doc, "workflow", OUTBOX_FIELD_MAX, &v.workflow, err)) != SF_OK ||
        (rc = read_opt_str(doc, "traceparent", OUTBOX_FIELD_MAX, &v.traceparent, err)) != SF_OK)
        return rc;
    if (v.id == NULL)
        return sf_err_set(err, SF_EINVAL, false, "outbox record: \"id\" is missing");
    if (v.event_type == NULL)
        return sf_err_set(err, SF_EINVAL, false, "outbox record %s: \"eventType\" is missing",
                          v.id);
    if (v.topic != NULL && !outbox_topic_valid(v.topic))
        return sf_err_set(err, SF_EINVAL, false,
                          "outbox record %s: \"topic\" is not a valid Kafka topic name", v.id);
    v.payload = json_object_get(doc, "payload");
    if (v.payload == NULL)
        return sf_err_set(err, SF_EINVAL, false, "outbox record %s: \"payload\" is missing", v.id);
    v.epoch = -1;
    epoch = json_object_get(doc, "epoch");
    if (epoch != NULL && !json_is_null(epoch)) {
        if (!json_is_integer(epoch) || json_integer_value(epoch) < 0)
            return sf_err_set(err, SF_EINVAL, false,
                              "outbox record %s: \"epoch\" is not a non-negative integer", v.id);
        v.epoch = (int64_t)json_integer_value(epoch);
    }
    *ret_view = v;
    return SF_OK;
}

enum sf_rc outbox_pk_key(const char *pk_json, struct sf_buf *out, struct sf_err *err)
{
    struct sf_err perr;
    json_t *arr = NULL, *first;
    enum sf_rc rc;
    size_t len;

    if (pk_json == NULL)
        return sf_err_set(err, SF_EINVAL, false, "partition key: NULL");
    /* The common case, ["plain string"], without a JSON parse per message. */
    len = strlen(pk_json);
    if (len >= 4 && pk_json[0] == '[' && pk_json[1] == '"' && pk_json[len - 2] == '"' &&
        pk_json[len - 1] == ']' && memchr(pk_json + 2, '"', len - 4) == NULL &&
        memchr(pk_json + 2, '\\', len - 4) == NULL) {
        bool ctl = false;
        size_t i;
        for (i = 2; i < len - 2 && !ctl; i++)
            ctl = (unsigned char)pk_json[i] < 0x20;
        if (!ctl) {
            rc = sf_buf_append(out, pk_json + 2, len - 4);
            return rc == SF_OK ? SF_OK
                               : sf_err_set(err, rc, false, "partition key: %s", sf_rc_str(rc));
        }
    }
    arr = sf_json_parse(pk_json, strlen(pk_json), &perr);
    if (arr == NULL)
        return sf_err_set(err, SF_EINVAL, false, "partition key '%.64s' is not JSON: %s", pk_json,
                          perr.msg);
    if (!json_is_array(arr) || json_array_size(arr) == 0) {
        rc = sf_err_set(err, SF_EINVAL, false, "partition key '%.64s' is not a non-empty array",
                        pk_json);
        goto out;
    }
    first = json_array_get(arr, 0);
    if (json_array_size(arr) > 1)
        rc = sf_json_dump(arr, out);
    else if (json_is_string(first))
        rc = sf_buf_append(out, json_string_value(first), json_string_length(first));
    else
        rc = sf_json_dump(first, out);
    if (rc != SF_OK)
        rc = sf_err_set(err, rc, false, "partition key: %s", sf_rc_str(rc));
out:
    json_decref(arr);
    return rc;
}
