/*
 * proc_embed.h - the embedded default: a private cosmolite child process.
 *
 * When the configuration names no Cosmos endpoint, sagafeed starts the
 * `cosmolite` binary on 127.0.0.1 with an ephemeral port, a data directory
 * and a fresh random key (passed through the environment, never on the
 * command line), waits for its port file, and stops it on exit. The child
 * gets PR_SET_PDEATHSIG(SIGTERM) so it never outlives sagafeed.
 *
 * Which binary: opts->binary, else `cosmolite` next to the sagafeed
 * executable, else ../emulator/cosmolite from it (the build tree), else the
 * first `cosmolite` on $PATH.
 */
#ifndef PROC_EMBED_H
#define PROC_EMBED_H

#include <sys/types.h>

#include "common/sf_base.h"
#include "common/sf_err.h"

struct proc_embed;

struct proc_embed_opts {
    const char *binary;   /* NULL: search (above) */
    const char *data_dir; /* created when missing */
    int partitions;       /* --partitions; 0 = server default */
    int64_t start_timeout_ms;
    const char *log_path; /* the server's stdout/stderr; NULL: <data_dir>/cosmolite.log */
};

/* Starts the server and waits until it listens. *ret_e only on success. */
enum sf_rc proc_embed_start(const struct proc_embed_opts *opts, struct proc_embed **ret_e,
                            struct sf_err *err);

/* "http://127.0.0.1:PORT". Borrowed until proc_embed_stop. */
const char *proc_embed_endpoint(const struct proc_embed *e);
/* The base64 key the server was started with. Borrowed. */
const char *proc_embed_key(const struct proc_embed *e);
pid_t proc_embed_pid(const struct proc_embed *e);

/* Stops the server (SIGTERM, SIGKILL after 10 s), reaps it and frees e. NULL is a no-op. */
void proc_embed_stop(struct proc_embed *e);

/* Finds the cosmolite binary as described above; out holds PATH_MAX bytes. */
enum sf_rc proc_embed_find_binary(const char *hint, char *out, size_t size, struct sf_err *err);

#endif
