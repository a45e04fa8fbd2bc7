/*
 * proc_change.h - sagas on deletes and expiries (issue 27): workflows with
 * `on = [...]` naming "delete" or "expire", read from the container's "all
 * versions and deletes" change feed (docs/azure-avad.md).
 *
 * The engine keeps a saga's state on its source item, and a deleted item has
 * nothing left to write state on. So each change such a workflow takes gets
 * one **carrier** document in the source container, in the item's logical
 * partition, created once (create-only id from the workflow, the change's LSN
 * and the item's id) and holding the saga's state:
 *
 *   {"id": "sfc.<workflow>.<lsn>.<item id>", "sfKind": "change",
 *    <the item's partition key fields>, "<state_field>": <first step's from>,
 *    "item": <the image>, "change": {"operation", "ttl_expired", "lsn", "crts", "id"},
 *    "ttl": <processor.marker_ttl>}
 *
 * Its sfKind keeps the carrier's own feed entries from the dispatcher
 * (record_is_system). Templates and conditions see the carrier's "item"
 * as `item` and its "change" as `change`: for a create or a replace the
 * current image, for a delete or an expiry the previous image (the container
 * keeps one), else {id, <partition key fields>} from the entry's metadata.
 * Each change is its own saga (the default saga_id is
 * "{{item.id}}.{{change.lsn}}"), so a create, a replace and a delete of one
 * item are three sagas, run in LSN order by the item's lane.
 *
 * Every function is pure (no I/O) and thread-safe.
 */
#ifndef PROC_CHANGE_H
#define PROC_CHANGE_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "config/cfg.h"

#define PROC_CHANGE_KIND    "change"                     /* the carrier's sfKind */
#define PROC_CHANGE_SAGA_ID "{{item.id}}.{{change.lsn}}" /* a change workflow's default */
#define PROC_CHANGE_ID_MAX  255                          /* carrier id bytes (Cosmos' limit) */

/* true when a workflow on container asks for deletes or expiries: read it in all-versions mode. */
bool proc_change_container(const struct cfg *cfg, const char *container);

/* true when w runs one saga per change on a carrier (its container is read in all-versions mode).
 */
bool proc_change_workflow(const struct cfg *cfg, const struct cfg_workflow *w);

/*
 * What check-config says about `on` beyond one workflow: a container read in
 * all-versions mode starts only now (feed.start must be "now"), every
 * workflow on it must say `on`, and a change workflow has neither await
 * steps nor a deadline (both wake a saga through its source item's feed,
 * which a carrier's is not). Adds "file:line: message" diagnostics.
 */
void proc_change_check(const struct cfg *cfg, struct cfg_diags *d);

/* true when doc is an entry of the all-versions feed ({current?, previous?, metadata}). */
bool proc_change_is_entry(const json_t *doc);

/*
 * The id of the item doc is about: its "id", or an all-versions entry's
 * metadata.id (entries have no id of their own). NULL when neither. Borrowed.
 */
const char *proc_change_doc_id(const json_t *doc);

/* The CFG_ON_* bit of entry (0 when its operationType is unknown). */
unsigned proc_change_bit(const json_t *entry);

/*
 * The image of entry templates see as `item` (new reference): current for a
 * create or replace, previous for a delete, else {id, <key fields>} from the
 * metadata. NULL when out of memory.
 */
json_t *proc_change_image(const json_t *entry);

/*
 * Builds the carrier of entry for workflow w (see the top of this file) into
 * *ret (new reference): pk_path is the source container's key path(s),
 * ttl_s the carrier's ttl (0: none). SF_EINVAL (naming why) when the entry
 * has no LSN or item id, or the key cannot be copied (a container keyed by
 * /id: the carrier's id is its own).
 */
enum sf_rc proc_change_carrier(const struct cfg_workflow *w, const json_t *entry,
                               const char *pk_path, int64_t ttl_s, json_t **ret,
                               struct sf_err *err);

/*
 * The template environment's `item` and `change` of a carrier: its "item"
 * and "change" members (borrowed; NULL when absent).
 */
const json_t *proc_change_item(const json_t *carrier);
const json_t *proc_change_info(const json_t *carrier);

#endif
