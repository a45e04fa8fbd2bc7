/*
 * store_testutil.h - helpers shared by the storage tests (test_emu_store.c,
 * test_emu_store_ops.c): opening a store, test JSON, a scratch directory for file-backed stores,
 * and SQL run directly on a closed store file.
 *
 * They abort the test with a message on failure (they are for tests only).
 */
#ifndef STORE_TESTUTIL_H
#define STORE_TESTUTIL_H

#include <jansson.h>

struct emu_store;
struct emu_store_opts;

/* Opens the store o describes; returns it (the caller closes it). */
struct emu_store *stt_open(const struct emu_store_opts *o);

/* Parses text (any JSON value); returns a new reference. */
json_t *stt_json(const char *text);

/*
 * Creates a private directory "/tmp/<name>.XXXXXX" into dir and names the
 * store file "<dir>/store.db" in path.
 */
void stt_mk_dir(char dir[64], char path[128], const char *name);

/* Removes the store file at path, its -wal and -shm files, then dir. */
void stt_rm_dir(const char *dir, const char *path);

/* Runs sql on the (closed) store file at path. */
void stt_sql_on_file(const char *path, const char *sql);

#endif
