/*
 * emu_fault.h - fault injection for cosmolite: answer 429/449/503/408, add
 * a delay, or drop the connection, for requests that match an operation kind
 * and a container, with a probability or for the next N requests.
 *
 * Rules come from `--fault SPEC` at start-up or from the admin endpoint at
 * run time. Decisions are drawn from one seeded PRNG, so a run with the same
 * seed and the same request sequence injects the same faults. Injected
 * statuses are answered before the store is touched (nothing is applied);
 * with `when=after` a drop or 408 happens after the operation committed, the
 * ambiguous outcome a client must survive. Either way no write is half-applied.
 * Thread-safe.
 */
#ifndef EMU_FAULT_H
#define EMU_FAULT_H

#include <jansson.h>

#include "common/sf_base.h"
#include "common/sf_err.h"

enum emu_op {
    EMU_OP_READ = 1 << 0,  /* point reads, read feeds, metadata reads */
    EMU_OP_WRITE = 1 << 1, /* create, upsert, replace, delete */
    EMU_OP_PATCH = 1 << 2,
    EMU_OP_BATCH = 1 << 3,
    EMU_OP_QUERY = 1 << 4,
    EMU_OP_CHANGEFEED = 1 << 5,
    EMU_OP_PKRANGES = 1 << 6,
    EMU_OP_META = 1 << 7, /* databases, containers, account */
    EMU_OP_ANY = 0xff,
};

/*
 * EMU_FAULT_STUCK: a change-feed read ignores its continuation and answers
 * from the beginning again, so a reader gets the same page (and etag) over
 * and over, the lying server a reader must notice. Other requests pass.
 * EMU_FAULT_LIE answers "200 OK" with an HTML page and applies nothing: a
 * misconfigured proxy or a lying server, which a client must not take for
 * success.
 */
enum emu_fault_kind {
    EMU_FAULT_STATUS,
    EMU_FAULT_DELAY,
    EMU_FAULT_DROP,
    EMU_FAULT_STUCK,
    EMU_FAULT_LIE
};

/* What to do to one request. kind == EMU_FAULT_NONE-equivalent: active false. */
struct emu_fault_action {
    bool active;
    enum emu_fault_kind kind;
    int status; /* EMU_FAULT_STATUS: 429, 449, 503, 408 */
    /*
     * x-ms-substatus of that status; -1: the default, which for a 429 is
     * 3092 (the service is busy) and not 3200: an injected throttle comes
     * at random, not from the container's RU budget, and a client that
     * paces itself to its budget must be able to tell (the real 3200 comes
     * from offers, --default-throughput). substatus=3200 imitates it.
     */
    int substatus;
    int64_t retry_after_ms;
    char retry_after_text[32]; /* sent as x-ms-retry-after-ms instead when not "" (bad hints) */
    int64_t delay_ms;          /* EMU_FAULT_DELAY (also applied before a status or drop) */
    bool after;                /* apply the operation first (drop / 408 only) */
};

struct emu_faults;

/* A new empty rule set with the given seed. NULL on OOM. */
struct emu_faults *emu_faults_new(uint64_t seed);
void emu_faults_free(struct emu_faults *f);

/*
 * Adds a rule from the command-line form
 *   status=429|449|503|408 | delay=MS | drop | stuck | lie
 *   [,op=read|write|patch|batch|query|changefeed|pkranges|meta|any[+...]]
 *   [,coll=NAME] [,p=PROBABILITY] [,count=N] [,retry-after=MS]
 *   [,retry-after-text=TEXT] [,substatus=N] [,when=before|after]
 * e.g. "status=429,op=write,coll=orders,p=0.1,retry-after=50".
 * SF_EINVAL with a message naming the bad field.
 */
enum sf_rc emu_faults_add_spec(struct emu_faults *f, const char *spec, struct sf_err *err);

/*
 * Replaces every rule (and optionally the seed) from the admin JSON form
 *   {"seed":42,"rules":[{"status":429,"op":"write","container":"orders",
 *     "probability":0.1,"count":5,"retryAfterMs":50,"delayMs":0,"drop":false,
 *     "when":"before"}]}     ("stuck":true instead of status / drop: see EMU_FAULT_STUCK;
 *     "lie":true likewise: see EMU_FAULT_LIE; "retryAfterText":"soon" as below)
 * retry-after-text (retryAfterText) sends that text as the hint of a 429,
 * 449 or 503 instead of a number: clients must survive bad hints.
 * Atomic: on error the old rules stay. SF_EINVAL naming the rule and field.
 */
enum sf_rc emu_faults_set_json(struct emu_faults *f, const json_t *body, struct sf_err *err);

/* The rules with how often each fired, as a new JSON object. */
json_t *emu_faults_to_json(struct emu_faults *f);

/* Removes every rule. */
void emu_faults_clear(struct emu_faults *f);

/*
 * Decides the fault for one request of kind op on container coll (NULL when
 * the request names none). The first matching rule that fires wins; a rule
 * with a count is used up after count firings.
 */
void emu_faults_decide(struct emu_faults *f, enum emu_op op, const char *coll,
                       struct emu_fault_action *ret_action);

#endif
