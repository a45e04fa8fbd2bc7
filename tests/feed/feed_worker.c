/*
 * feed_worker.c - one change feed processor instance in its own process,
 * for the multi-process tests (test_feed_multi) and for trying the feed by
 * hand against any endpoint.
 *
 * Every delivered item is appended to --out as "<lsn> <id> <range>\n" and
 * the file is fsync'd before the item is acknowledged, so after a kill -9
 * the file holds at least every item whose checkpoint could have been
 * written. SIGTERM or SIGINT stops the processor gracefully (drain,
 * checkpoint, release) and exits 0. Events go to stderr through sf_log.
 *
 *   feed_worker --endpoint URL [--key B64] --db D --coll C --prefix P
 *               --name NAME --out FILE [--lease-coll leases]
 *               [--expiry MS] [--renew MS] [--acquire MS] [--poll MS]
 */
#include "common/sf_base.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

#include "common/sf_auth.h"
#include "common/sf_json.h"
#include "common/sf_log.h"
#include "common/sf_parse.h"
#include "common/sf_time.h"
#include "feed/feed.h"

/* Set by the signal handler, on any thread (hence atomic); the main loop polls it. */
static atomic_int stop_flag;

static void on_signal(int sig)
{
    SF_UNUSED(sig);
    stop_flag = 1;
}

struct out_file {
    pthread_mutex_t mu;
    int fd;
    bool failed;
};

static void consume(void *ctx, struct feed_item *it)
{
    struct out_file *o = ctx;
    const char *id = sf_json_str(feed_item_doc(it), "id");
    char line[1200];
    int n = snprintf(line, sizeof(line), "%lld %s %s\n", (long long)feed_item_lsn(it),
                     id ? id : "?", feed_item_range(it));

    pthread_mutex_lock(&o->mu);
    if (n > 0 && (size_t)n < sizeof(line) && write(o->fd, line, (size_t)n) == n &&
        fsync(o->fd) == 0) {
        pthread_mutex_unlock(&o->mu);
        feed_item_ack(it);
        return;
    }
    /* Not recorded: do not ack, so the item is never checkpointed past. */
    o->failed = true;
    pthread_mutex_unlock(&o->mu);
    sf_log_error("feed_worker", "cannot record item %s: %s", id ? id : "?", strerror(errno));
}

static void on_event(void *ctx, const struct feed_event *ev)
{
    SF_UNUSED(ctx);
    sf_log(ev->kind == FEED_EV_ACQUIRED || ev->kind == FEED_EV_RELEASED || ev->kind == FEED_EV_SPLIT
               ? SF_LOG_INFO
               : SF_LOG_WARN,
           "feed", "%s", ev->msg);
}

static int usage(void)
{
    fprintf(stderr, "usage: feed_worker --endpoint URL [--key B64] --db D --coll C --prefix P "
                    "--name NAME --out FILE [--lease-coll C] [--expiry MS] [--renew MS] "
                    "[--acquire MS] [--poll MS]\n");
    return 2;
}

static bool ms_arg(const char *s, int64_t *ret)
{
    return sf_parse_i64(s, 1, 3600000, ret) == SF_OK;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"endpoint", required_argument, NULL, 'e'},
                                             {"key", required_argument, NULL, 'k'},
                                             {"db", required_argument, NULL, 'd'},
                                             {"coll", required_argument, NULL, 'c'},
                                             {"prefix", required_argument, NULL, 'p'},
                                             {"name", required_argument, NULL, 'n'},
                                             {"out", required_argument, NULL, 'o'},
                                             {"lease-coll", required_argument, NULL, 'l'},
                                             {"expiry", required_argument, NULL, 'x'},
                                             {"renew", required_argument, NULL, 'r'},
                                             {"acquire", required_argument, NULL, 'a'},
                                             {"poll", required_argument, NULL, 'P'},
                                             {NULL, 0, NULL, 0}};
    struct cosmos_options co;
    struct feed_options fo;
    struct cosmos_client *cli = NULL;
    struct feed_processor *p = NULL;
    struct out_file out = {.fd = -1};
    struct sigaction sa;
    const char *path = NULL;
    struct sf_err err;
    int c, rc = 1;

    memset(&co, 0, sizeof(co));
    memset(&fo, 0, sizeof(fo));
    co.key = SF_EMULATOR_KEY;
    fo.lease_coll = "leases";
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'e':
            co.endpoint = optarg;
            break;
        case 'k':
            co.key = optarg;
            break;
        case 'd':
            fo.db = optarg;
            break;
        case 'c':
            fo.coll = optarg;
            break;
        case 'p':
            fo.lease_prefix = optarg;
            break;
        case 'n':
            fo.instance = optarg;
            break;
        case 'o':
            path = optarg;
            break;
        case 'l':
            fo.lease_coll = optarg;
            break;
        case 'x':
            if (!ms_arg(optarg, &fo.lease_expiry_ms))
                return usage();
            break;
        case 'r':
            if (!ms_arg(optarg, &fo.renew_ms))
                return usage();
            break;
        case 'a':
            if (!ms_arg(optarg, &fo.acquire_ms))
                return usage();
            break;
        case 'P':
            if (!ms_arg(optarg, &fo.poll_ms))
                return usage();
            break;
        default:
            return usage();
        }
    }
    if (co.endpoint == NULL || path == NULL || optind != argc)
        return usage();
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)sigaction(SIGINT, &sa, NULL);
    pthread_mutex_init(&out.mu, NULL);
    out.fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out.fd < 0) {
        sf_log_error("feed_worker", "cannot open %s: %s", path, strerror(errno));
        goto out;
    }
    co.request_timeout_ms = 10000;
    if (cosmos_client_new(&co, &cli, &err) != SF_OK) {
        sf_log_error("feed_worker", "%s", err.msg);
        goto out;
    }
    fo.consume = consume;
    fo.consume_ctx = &out;
    fo.on_event = on_event;
    if (feed_processor_new(cli, cli, &fo, &p, &err) != SF_OK ||
        feed_processor_start(p, &err) != SF_OK) {
        sf_log_error("feed_worker", "%s", err.msg);
        goto out;
    }
    sf_log_info("feed_worker", "instance %s running", feed_processor_instance(p));
    while (!stop_flag)
        sf_sleep_ms(50);
    if (feed_processor_stop(p, 5000, &err) != SF_OK) {
        sf_log_error("feed_worker", "stop: %s", err.msg);
        goto out;
    }
    rc = out.failed ? 1 : 0;
out:
    feed_processor_free(p);
    cosmos_client_free(cli);
    if (out.fd >= 0)
        (void)close(out.fd);
    pthread_mutex_destroy(&out.mu);
    return rc;
}
