/*
 * emu_script_int.h - the parts of the script engine its files share: a
 * collection call as the sandbox hands it over (JSON text, parsed by
 * emu_script__call_parse, which the fuzz target drives), and the
 * execution's transaction (emu_script_tx.c).
 */
#ifndef EMU_SCRIPT_INT_H
#define EMU_SCRIPT_INT_H

#include "emulator/emu_script.h"

/* Sets err (rc, http_status, message; substatus 0) and returns rc. */
enum sf_rc emu_script__fail(struct sf_err *err, enum sf_rc rc, int status, const char *fmt, ...)
    SF_PRINTF(4, 5);

/* The collection functions a script can call. */
enum emu_script_op {
    EMU_SOP_CREATE,
    EMU_SOP_UPSERT,
    EMU_SOP_REPLACE,
    EMU_SOP_READ,
    EMU_SOP_DELETE,
    EMU_SOP_QUERY,
    EMU_SOP_READ_ALL,
};

/* Names the container a script runs in: its links by name and by rid. */
struct emu_script_self {
    const char *db, *coll;         /* names */
    const char *db_rid, *coll_rid; /* resource ids */
};

/*
 * One collection call: {"op":"createDocument","link":..,"body":..,"options":..}
 * as the prelude serialises it. Every pointer borrows from root.
 */
struct emu_script_call {
    json_t *root; /* owned */
    enum emu_script_op op;
    const char *id;         /* the document link's id (read, replace, delete) */
    bool by_rid;            /* a _self link: id is the document's _rid */
    const json_t *body;     /* the document (create, upsert, replace) */
    const char *query;      /* query text (query, readDocuments) */
    const json_t *params;   /* query parameters, or NULL */
    const char *if_match;   /* options.etag, or NULL */
    bool no_auto_id;        /* options.disableAutomaticIdGeneration */
    int page_size;          /* options.pageSize, -1 = all */
    long long continuation; /* options.continuation (rows to skip), 0 = none */
};

/*
 * Parses and checks one call (text of len bytes, not trusted): the operation
 * name, a link that names this container (or one of its documents, by name
 * or rid, slashes at either end optional), a document that is an object,
 * option types. On success *ret is filled (release with
 * emu_script__call_release). Errors are SF_EINVAL with http_status 400 and a
 * message a script author can act on.
 */
enum sf_rc emu_script__call_parse(const char *text, size_t len, const struct emu_script_self *self,
                                  struct emu_script_call *ret, struct sf_err *err);
void emu_script__call_release(struct emu_script_call *call);

/* ---- the transaction (emu_script_tx.c) ---- */

struct emu_script_tx;

/*
 * A new transaction of container c in partition pk (header array, borrowed
 * like c and s for the transaction's life); max_writes caps the documents it
 * may write. NULL when out of memory.
 */
struct emu_script_tx *emu_script__tx_new(struct emu_store *s, const struct emu_coll_ref *c,
                                         const json_t *pk, int max_writes);
void emu_script__tx_free(struct emu_script_tx *tx);

/*
 * Runs call against the store seen through the transaction's own writes and
 * appends the answer for the sandbox to out:
 * {"accepted":true,"status":201,"resource":..,"options":{..}} or
 * {"accepted":true,"status":409,"message":".."}, or {"accepted":false} when
 * the call would pass max_writes (the script should stop and return).
 * Non-OK only for failures that are not the call's (out of memory, SQL).
 */
enum sf_rc emu_script__tx_call(struct emu_script_tx *tx, const struct emu_script_call *call,
                               struct sf_buf *out, struct sf_err *err);

/*
 * Writes everything the transaction holds as one batch (nothing when it
 * wrote nothing). 449 when a document it wrote changed meanwhile.
 */
enum sf_rc emu_script__tx_commit(struct emu_script_tx *tx, struct emu_script_result *ret_res,
                                 struct sf_err *err);

#endif
