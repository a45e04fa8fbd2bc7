/*
 * plain_http_server - the ceiling for cosmolite_bench: a libmicrohttpd server
 * that answers 200 "{}" to every request and does nothing else.
 *
 *   plain_http_server --listen 127.0.0.1:0 --port-file FILE [--threads N]
 *                     [--turbo] [--chunked]
 *
 * It uses the threading mode cosmolite uses (an internal polling thread pool
 * with epoll, 2 threads by default) and the same two-call request pattern
 * (remember the request on the first callback, answer once the body is in),
 * so the difference between the two is the work cosmolite does per request.
 * --chunked answers with Transfer-Encoding: chunked (to exercise clients),
 * --turbo adds MHD_USE_TURBO.
 *
 * The port file gets "<port>\n" (written to FILE.tmp and renamed, so a reader
 * never sees a partial file) once the daemon accepts connections.
 * SIGTERM or SIGINT stops it with exit status 0.
 */
#include "common/sf_base.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/sf_parse.h"

struct plain_server {
    struct MHD_Response *ok; /* shared "{}" response, reused by every request */
    bool chunked;
    int request_marker; /* its address tags a request seen once */
};

static void usage(FILE *f)
{
    fprintf(f, "usage: plain_http_server --listen HOST:PORT --port-file FILE [--threads N] "
               "[--turbo] [--chunked]\n");
}

/* Chunked body reader: "{}" at position 0, then the end of the stream. */
static ssize_t chunked_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    SF_UNUSED(cls);
    if (pos >= 2)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (max < 2)
        return 0;
    memcpy(buf, "{}", 2);
    return 2;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    struct plain_server *srv = cls;
    SF_UNUSED(url);
    SF_UNUSED(method);
    SF_UNUSED(version);
    SF_UNUSED(upload_data);

    if (*req_cls == NULL) {
        *req_cls = &srv->request_marker;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        *upload_data_size = 0; /* discard the body */
        return MHD_YES;
    }
    if (!srv->chunked)
        return MHD_queue_response(conn, MHD_HTTP_OK, srv->ok);

    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64, chunked_reader, NULL, NULL);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* Parses "a.b.c.d:port" into addr. */
static bool parse_listen(const char *s, struct sockaddr_in *addr)
{
    const char *colon = strrchr(s, ':');
    char host[64];
    int64_t port;
    if (!colon || (size_t)(colon - s) >= sizeof(host) ||
        sf_parse_i64(colon + 1, 0, 65535, &port) != SF_OK)
        return false;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    memset(addr, 0, sizeof(*addr));
    addr->sin_family = AF_INET;
    addr->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &addr->sin_addr) == 1;
}

static bool write_port_file(const char *path, int port)
{
    char tmp[4096];
    char text[16];
    bool ok = false;
    int n = snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return false;
    int len = snprintf(text, sizeof(text), "%d\n", port);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return false;
    ok = write(fd, text, (size_t)len) == len;
    ok = close(fd) == 0 && ok;
    return ok && rename(tmp, path) == 0;
}

int main(int argc, char **argv)
{
    const char *listen_at = NULL;
    const char *port_file = NULL;
    int64_t threads = 2;
    bool turbo = false;
    struct plain_server srv = {0};
    struct MHD_Daemon *daemon = NULL;
    int lfd = -1;
    int status = 1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--listen") == 0 && i + 1 < argc) {
            listen_at = argv[++i];
        } else if (strcmp(a, "--port-file") == 0 && i + 1 < argc) {
            port_file = argv[++i];
        } else if (strcmp(a, "--threads") == 0 && i + 1 < argc) {
            if (sf_parse_i64(argv[++i], 1, 64, &threads) != SF_OK) {
                fprintf(stderr, "plain_http_server: --threads takes 1..64\n");
                return 2;
            }
        } else if (strcmp(a, "--turbo") == 0) {
            turbo = true;
        } else if (strcmp(a, "--chunked") == 0) {
            srv.chunked = true;
        } else if (strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "plain_http_server: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    struct sockaddr_in addr;
    if (!listen_at || !port_file || !parse_listen(listen_at, &addr)) {
        usage(stderr);
        return 2;
    }

    /* Block the stop signals before MHD starts its threads, so they inherit the mask. */
    sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGTERM);
    sigaddset(&stop_set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_set, NULL);

    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || listen(lfd, 1024) != 0) {
        fprintf(stderr, "plain_http_server: listen on %s: %s\n", listen_at, strerror(errno));
        goto out;
    }
    socklen_t alen = sizeof(addr);
    if (getsockname(lfd, (struct sockaddr *)&addr, &alen) != 0) {
        fprintf(stderr, "plain_http_server: getsockname: %s\n", strerror(errno));
        goto out;
    }

    srv.ok = MHD_create_response_from_buffer(2, (void *)(uintptr_t) "{}", MHD_RESPMEM_PERSISTENT);
    if (!srv.ok || MHD_add_response_header(srv.ok, MHD_HTTP_HEADER_CONTENT_TYPE,
                                           "application/json") != MHD_YES) {
        fprintf(stderr, "plain_http_server: cannot create the response\n");
        goto out;
    }

    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
    if (turbo)
        flags |= MHD_USE_TURBO;
    daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, &srv, MHD_OPTION_LISTEN_SOCKET, lfd,
                              MHD_OPTION_THREAD_POOL_SIZE, (unsigned)threads, MHD_OPTION_END);
    if (!daemon) {
        fprintf(stderr, "plain_http_server: MHD_start_daemon failed\n");
        goto out;
    }
    lfd = -1; /* the daemon owns and closes it */

    if (!write_port_file(port_file, ntohs(addr.sin_port))) {
        fprintf(stderr, "plain_http_server: writing %s: %s\n", port_file, strerror(errno));
        goto out;
    }

    int sig = 0;
    while (sigwait(&stop_set, &sig) != 0) {
    }
    status = 0;
out:
    if (daemon)
        MHD_stop_daemon(daemon);
    if (lfd >= 0)
        close(lfd);
    if (srv.ok)
        MHD_destroy_response(srv.ok);
    return status;
}
