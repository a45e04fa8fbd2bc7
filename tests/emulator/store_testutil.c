/*
 * store_testutil.c - see store_testutil.h.
 */
#include "common/sf_base.h"

#include <check.h>
#include <sqlite3.h>
#include <unistd.h>

#include "emulator/emu_store.h"
#include "tests/emulator/store_testutil.h"

struct emu_store *stt_open(const struct emu_store_opts *o)
{
    struct emu_store *s = NULL;
    struct sf_err err;

    sf_err_clear(&err);
    ck_assert_msg(emu_store_open(o, &s, &err) == SF_OK, "open: %s", err.msg);
    return s;
}

json_t *stt_json(const char *text)
{
    json_error_t je;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &je);

    ck_assert_msg(v != NULL, "bad test JSON %s: %s", text, je.text);
    return v;
}

void stt_mk_dir(char dir[64], char path[128], const char *name)
{
    (void)snprintf(dir, 64, "/tmp/%s.XXXXXX", name);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    (void)snprintf(path, 128, "%s/store.db", dir);
}

void stt_rm_dir(const char *dir, const char *path)
{
    char p[160];

    (void)unlink(path);
    (void)snprintf(p, sizeof(p), "%s-wal", path);
    (void)unlink(p);
    (void)snprintf(p, sizeof(p), "%s-shm", path);
    (void)unlink(p);
    (void)rmdir(dir);
}

void stt_sql_on_file(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    char *msg = NULL;

    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK, "%s: %s", sql,
                  msg != NULL ? msg : "");
    sqlite3_free(msg);
    ck_assert_int_eq(sqlite3_close(db), SQLITE_OK);
}
