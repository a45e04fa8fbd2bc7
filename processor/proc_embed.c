/*
 * proc_embed.c - starting and stopping a private cosmolite (proc_embed.h).
 */
#include "common/sf_base.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sf_crypto.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "processor/proc_embed.h"

struct proc_embed {
    pid_t pid;
    char endpoint[64];
    char key[128];
    char port_file[PATH_MAX];
};

static bool executable(const char *p)
{
    return access(p, X_OK) == 0;
}

enum sf_rc proc_embed_find_binary(const char *hint, char *out, size_t size, struct sf_err *err)
{
    char self[PATH_MAX];
    ssize_t n;
    const char *path;

    if (hint != NULL) {
        if (!executable(hint))
            return sf_err_set(err, SF_ENOTFOUND, false, "embedded.binary %s is not executable",
                              hint);
        (void)snprintf(out, size, "%s", hint);
        return SF_OK;
    }
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        char *slash;

        self[n] = '\0';
        slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            (void)snprintf(out, size, "%s/cosmolite", self);
            if (executable(out))
                return SF_OK;
            (void)snprintf(out, size, "%s/../emulator/cosmolite", self);
            if (executable(out))
                return SF_OK;
        }
    }
    path = getenv("PATH");
    while (path != NULL && *path != '\0') {
        size_t len = strcspn(path, ":");

        if (len > 0 && (size_t)snprintf(out, size, "%.*s/cosmolite", (int)len, path) < size &&
            executable(out))
            return SF_OK;
        path += len;
        if (*path == ':')
            path++;
    }
    return sf_err_set(err, SF_ENOTFOUND, false,
                      "cannot find the cosmolite binary (next to sagafeed, in ../emulator, or on "
                      "$PATH); set embedded.binary or cosmos.endpoint");
}

static enum sf_rc mkdir_p(const char *dir, struct sf_err *err)
{
    char tmp[PATH_MAX];

    if ((size_t)snprintf(tmp, sizeof(tmp), "%s", dir) >= sizeof(tmp))
        return sf_err_set(err, SF_EINVAL, false, "data directory path too long");
    for (char *p = tmp + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
                return sf_err_set(err, SF_EIO, false, "mkdir %s: %s", tmp, strerror(errno));
            *p = '/';
        }
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return sf_err_set(err, SF_EIO, false, "mkdir %s: %s", tmp, strerror(errno));
    return SF_OK;
}

static int read_port(const char *file)
{
    char buf[32];
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    ssize_t n;
    int64_t port;

    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    (void)close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    if (sf_parse_i64(buf, 1, 65535, &port) != SF_OK)
        return -1;
    return (int)port;
}

enum sf_rc proc_embed_start(const struct proc_embed_opts *opts, struct proc_embed **ret_e,
                            struct sf_err *err)
{
    struct proc_embed *e = NULL;
    char bin[PATH_MAX], log_path[PATH_MAX], parts[16];
    unsigned char raw[64];
    int64_t deadline;
    enum sf_rc rc;
    int log_fd = -1;

    rc = proc_embed_find_binary(opts->binary, bin, sizeof(bin), err);
    if (rc != SF_OK)
        return rc;
    rc = mkdir_p(opts->data_dir, err);
    if (rc != SF_OK)
        return rc;
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return sf_err_set(err, SF_ENOMEM, false, "out of memory");
    e->pid = -1;
    /* A fresh key per run: nobody else on the machine can talk to our server. */
    if (sf_random_bytes(raw, sizeof(raw)) != SF_OK) {
        rc = sf_err_set(err, SF_EIO, false, "no random bytes for the embedded key");
        goto fail;
    }
    sf_base64_encode(raw, sizeof(raw), e->key);
    (void)snprintf(e->port_file, sizeof(e->port_file), "%s/cosmolite.port", opts->data_dir);
    (void)unlink(e->port_file);
    (void)snprintf(log_path, sizeof(log_path), "%s", opts->log_path != NULL ? opts->log_path : "");
    if (opts->log_path == NULL)
        (void)snprintf(log_path, sizeof(log_path), "%s/cosmolite.log", opts->data_dir);
    log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (log_fd < 0) {
        rc = sf_err_set(err, SF_EIO, false, "open %s: %s", log_path, strerror(errno));
        goto fail;
    }
    (void)snprintf(parts, sizeof(parts), "%d", opts->partitions > 0 ? opts->partitions : 1);
    e->pid = fork();
    if (e->pid < 0) {
        rc = sf_err_set(err, SF_EIO, false, "fork: %s", strerror(errno));
        goto fail;
    }
    if (e->pid == 0) {
        const char *argv[] = {bin,      "--listen",     "127.0.0.1:0",  "--port-file", e->port_file,
                              "--data", opts->data_dir, "--partitions", parts,         "--log-json",
                              NULL};

        (void)prctl(PR_SET_PDEATHSIG, SIGTERM);
        (void)dup2(log_fd, 1);
        (void)dup2(log_fd, 2);
        (void)setenv("COSMOLITE_KEY", e->key, 1);
        execv(bin, (char *const *)argv); /* execv does not modify them */
        _exit(127);
    }
    (void)close(log_fd);
    log_fd = -1;
    deadline = sf_mono_ms() + (opts->start_timeout_ms > 0 ? opts->start_timeout_ms : 15000);
    for (;;) {
        int port = read_port(e->port_file), status;

        if (port > 0) {
            (void)snprintf(e->endpoint, sizeof(e->endpoint), "http://127.0.0.1:%d", port);
            break;
        }
        if (waitpid(e->pid, &status, WNOHANG) == e->pid) {
            e->pid = -1;
            rc = sf_err_set(err, SF_EIO, false, "cosmolite (%s) exited at start; see %s", bin,
                            log_path);
            goto fail;
        }
        if (sf_mono_ms() > deadline) {
            rc = sf_err_set(err, SF_ETIMEOUT, false, "cosmolite did not start in time; see %s",
                            log_path);
            goto fail;
        }
        sf_sleep_ms(20);
    }
    *ret_e = e;
    return SF_OK;
fail:
    if (log_fd >= 0)
        (void)close(log_fd);
    proc_embed_stop(e);
    return rc;
}

const char *proc_embed_endpoint(const struct proc_embed *e)
{
    return e->endpoint;
}

const char *proc_embed_key(const struct proc_embed *e)
{
    return e->key;
}

pid_t proc_embed_pid(const struct proc_embed *e)
{
    return e->pid;
}

void proc_embed_stop(struct proc_embed *e)
{
    if (e == NULL)
        return;
    if (e->pid > 0) {
        int64_t deadline = sf_mono_ms() + 10000;
        int status;

        (void)kill(e->pid, SIGTERM);
        while (waitpid(e->pid, &status, WNOHANG) == 0) {
            if (sf_mono_ms() > deadline) {
                (void)kill(e->pid, SIGKILL);
                (void)waitpid(e->pid, &status, 0);
                break;
            }
            sf_sleep_ms(20);
        }
    }
    (void)unlink(e->port_file);
    explicit_bzero(e->key, sizeof(e->key));
    free(e);
}
