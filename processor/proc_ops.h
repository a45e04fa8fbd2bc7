/*
 * proc_ops.h - what `sagafeed run` does for operators while it runs: obeys
 * the fleet's control document (pause / resume), counts what happens, and
 * serves /metrics (Prometheus text), /healthz and /readyz over HTTP when a
 * listen address is configured (processor.http_listen or --http).
 *
 * Life cycle, all from the thread that owns the service:
 *
 *   proc_ops_new           before proc_service_start; no I/O. Pass
 *                          proc_ops_on_result / ops as the service's on_result
 *                          and start the service with start_paused = true:
 *   proc_ops_attach        reads the control document at once and resumes the
 *                          service unless the fleet is paused (so an instance
 *                          started during a pause never applies an effect);
 *                          starts the HTTP endpoint.
 *   proc_ops_tick          every ~100 ms: re-reads the control document every
 *                          feed.poll_interval and pauses / resumes the service.
 *   proc_ops_detach        stops the HTTP endpoint; then stop the service;
 *   proc_ops_free          after the service stopped (it may still report
 *                          results until then).
 *
 * Metrics (counters since start, gauges now):
 *   sagafeed_items_received_total              items handed to the dispatcher
 *   sagafeed_items_total{outcome}              completed, failed, skipped, parked, waiting,
 *                                              replayed (proc_stats)
 *   sagafeed_sagas_total{workflow,outcome}     sagas settled by this instance
 *   sagafeed_steps_total{workflow,step,outcome} step elements (do and undo): applied,
 *                                              already_applied (found applied: a redelivery),
 *                                              business_failure (the step failed and moved its
 *                                              saga into compensation; once per saga). Counted
 *                                              by the engine (proc_engine_step_counts) without
 *                                              a lock; sum over workflow and step for totals.
 *   sagafeed_retries_total{status}             engine calls repeated after a transient
 *                                              error, by HTTP status ("0": transport)
 *   sagafeed_parked_keys                       partition keys blocked by parked items,
 *                                              fleet-wide (as of the last parking scan)
 *   sagafeed_leases_owned{container}           ranges this instance reads
 *   sagafeed_lag_items{container,range}        LSNs behind (only once known)
 *   sagafeed_lag_seconds{container,range}      age of the oldest unprocessed change
 *   sagafeed_range_started{container,range}    0 before the first checkpoint
 *   sagafeed_range_pending_items{container,range}
 *   sagafeed_range_last_progress_timestamp_seconds{container,range}
 *   sagafeed_hang_guard_fired_total{container}, sagafeed_leases_lost_total{container}
 *   sagafeed_request_charge_total              request units of every Cosmos call
 *   sagafeed_paused                            1 while the fleet is paused
 *   sagafeed_kafka_broker_up                   with a kafka section: 1 while a broker is
 *                                              reachable, 0 while none is (warned once in the
 *                                              log, and a detail line of /readyz, which stays
 *                                              200: sagas run, events wait in the outbox)
 *   sagafeed_relay_lag_items{relay,range}      a Kafka relay's lag (proc_kafka_relay_feed),
 *   sagafeed_relay_lag_seconds{relay,range}    only while relays run
 *   sagafeed_kafka_events_total{outcome}       published, delivered, failed, retried, held
 *   sagafeed_kafka_in_flight                   handed to Kafka, not acknowledged yet
 *   process_resident_memory_bytes              RSS (/proc/self/statm; left out elsewhere)
 */
#ifndef PROC_OPS_H
#define PROC_OPS_H

#include "common/sf_base.h"
#include "common/sf_buf.h"
#include "common/sf_err.h"
#include "config/cfg.h"
#include "cosmos/cosmos.h"
#include "processor/proc_dispatch.h"
#include "processor/proc_http.h"
#include "processor/proc_service.h"

struct proc_ops;

struct proc_ops_opts {
    const struct cfg *cfg;   /* borrowed; outlives ops */
    const char *http_listen; /* "HOST:PORT" for /metrics etc.; NULL: off (copied) */
    const char *instance;    /* for the sagafeed_info metric; NULL: feed.instance */
    /* More routes on the same listener (the console's /ui/ and /api/v1/); NULL: none.
       Borrowed: outlives ops. */
    const struct proc_http_hook *http_hook;
};

/* Creates ops (no I/O besides checking the listen address). */
enum sf_rc proc_ops_new(const struct proc_ops_opts *opts, struct proc_ops **ret_ops,
                        struct sf_err *err);

/* The service's on_result hook (ctx = ops): counts sagas by workflow and outcome. */
void proc_ops_on_result(void *ctx, const struct proc_item *it, const struct proc_result *res,
                        unsigned attempts, bool parked);

/* See the top of this file. svc is borrowed until proc_ops_detach. */
enum sf_rc proc_ops_attach(struct proc_ops *ops, struct proc_service *svc, struct sf_err *err);

void proc_ops_tick(struct proc_ops *ops);

/*
 * One look at Cosmos DB's reach r (cosmos_client_reach) at mono time now_ms,
 * as proc_ops_tick takes it: Cosmos DB is down once nothing answered for
 * processor.unreachable_after (then /readyz says 503), and while it is down
 * one warning line sums up per processor.outage_log_interval. Returns true
 * when this look wrote such a line (the first or a summary). The thread of
 * proc_ops_tick; tests step now_ms instead of waiting.
 */
bool proc_ops_outage_step(struct proc_ops *ops, const struct cosmos_reach *r, int64_t now_ms);

/* The Prometheus text of the metrics above into out. Any thread while attached. */
enum sf_rc proc_ops_metrics(struct proc_ops *ops, struct sf_buf *out);

void proc_ops_detach(struct proc_ops *ops);

/* Frees ops. NULL is a no-op. */
void proc_ops_free(struct proc_ops *ops);

#endif
