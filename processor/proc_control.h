/*
 * proc_control.h - the fleet's control document: pause and resume.
 *
 * One small document in the lease container (partitioned by /id) tells
 * every instance running a configuration whether to work:
 *
 *   {"id":"<feed.lease_prefix>.sf-control","sfKind":"control","paused":true,
 *    "by":"alice@ops-1","reason":"kafka down","at":"<ISO 8601>","version":4}
 *
 * `sagafeed pause` / `resume` write it; `sagafeed run` reads it every
 * feed.poll_interval (proc_ops.h) and pauses or resumes its service. No
 * document means "not paused". The id cannot collide with a lease: lease ids
 * are "<lease_prefix>.<container>..<range>" and never end in ".sf-control".
 *
 * Library code: no logging, no exit. Any thread.
 */
#ifndef PROC_CONTROL_H
#define PROC_CONTROL_H

#include "common/sf_base.h"
#include "common/sf_err.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"

#define PROC_CONTROL_SUFFIX ".sf-control"

/* The control state as read. Plain data. */
struct proc_control {
    bool exists;      /* false: no document (never paused) */
    bool paused;      /* the fleet must not work */
    char by[128];     /* who changed it last ("" unknown) */
    char reason[256]; /* why ("" none) */
    int64_t at_ms;    /* when (wall clock ms), -1 unknown */
    int64_t version;  /* bumps on every change */
};

/* The control document's id for cfg into out. SF_ELIMIT when too long. */
enum sf_rc proc_control_id(const struct cfg *cfg, char *out, size_t size);

/*
 * Reads the control document of cfg's fleet. A missing document (or lease
 * container) is a success with ret->exists == false. *ret is written only on
 * success.
 */
enum sf_rc proc_control_read(struct cosmos_client *cli, const struct cfg *cfg,
                             struct proc_control *ret, struct sf_err *err);

/*
 * Sets paused (with who and why; either may be NULL), creating the lease
 * container and the document when missing. The write is an If-Match
 * replace (or a create), retried after a concurrent change, so versions
 * never go backwards. *ret (may be NULL) gets the new state.
 */
enum sf_rc proc_control_write(struct cosmos_client *cli, const struct cfg *cfg, bool paused,
                              const char *by, const char *reason, struct proc_control *ret,
                              struct sf_err *err);

#endif
