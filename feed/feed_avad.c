/*
 * feed_avad.c - the entries of the "all versions and deletes" change feed
 * (docs/azure-avad.md): {current, previous, metadata{lsn, crts, operationType,
 * timeToLiveExpired, id, partitionKey}}. The reader hands them to the
 * consumer as they are; this file finds what the feed itself needs of one
 * (its LSN, time and partition key) where an item of the other mode has
 * _lsn, _ts and the key fields.
 */
#include "common/sf_base.h"

#include "common/sf_json.h"
#include "feed/feed_int.h"

int64_t feed_entry_lsn(const json_t *doc, bool all_versions)
{
    return all_versions ? sf_json_int(json_object_get(doc, "metadata"), "lsn", -1)
                        : sf_json_int(doc, "_lsn", -1);
}

int64_t feed_entry_ts(const json_t *doc, bool all_versions)
{
    return all_versions ? sf_json_int(json_object_get(doc, "metadata"), "crts", -1)
                        : sf_json_int(doc, "_ts", -1);
}

const json_t *feed_entry_image(const json_t *doc, bool all_versions)
{
    const json_t *image;

    if (!all_versions)
        return doc;
    image = json_object_get(doc, "current");
    if (!json_is_object(image))
        image = json_object_get(doc, "previous");
    return json_is_object(image) ? image : NULL;
}

enum sf_rc feed_entry_pk_json(const json_t *doc, bool all_versions, char paths[][256],
                              size_t n_paths, struct sf_buf *out)
{
    const json_t *image;

    if (!all_versions)
        return feed_pk_json(doc, paths, n_paths, out);
    /* The image that exists (a delete has only the previous one), else the metadata's key. */
    image = feed_entry_image(doc, true);
    if (image == NULL)
        image = json_object_get(json_object_get(doc, "metadata"), "partitionKey");
    /* metadata.partitionKey is shaped like the key paths ({"pk":"a"}): the same walk reads it. */
    return feed_pk_json(json_is_object(image) ? image : NULL, paths, n_paths, out);
}
