/*
 * sagafeed-kafka-mock - starts librdkafka's in-process mock Kafka cluster,
 * prints its bootstrap address and serves it until SIGTERM or SIGINT, so a
 * relay, kcat or any Kafka client can be pointed at a broker without a JVM:
 *
 *   $ sagafeed-kafka-mock --brokers 3 --topic order-events:6 &
 *   127.0.0.1:40411,127.0.0.1:35245,127.0.0.1:41133
 *   $ kcat -b 127.0.0.1:40411 -L
 *
 * The mock keeps every message in memory and forgets it on exit. It is an
 * experimental librdkafka facility (rdkafka_mock.h): good for development and
 * tests, not a Kafka to run in production.
 */
#include "common/sf_base.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "common/sf_parse.h"

#define KMOCK_TOPICS_MAX 64
#define KMOCK_NAME_MAX   249 /* Kafka's topic name limit */

static const char usage[] =
    "Usage: sagafeed-kafka-mock [OPTIONS]\n"
    "\n"
    "Starts librdkafka's mock Kafka cluster on 127.0.0.1, prints its bootstrap\n"
    "address (one line, comma-separated brokers) on stdout and serves it until\n"
    "SIGTERM or SIGINT. Messages live in memory only.\n"
    "\n"
    "Options:\n"
    "  --brokers N          number of brokers (default 1, max 16)\n"
    "  --topic NAME:PARTS   create topic NAME with PARTS partitions (repeatable;\n"
    "                       other topics are created on first use with 4 partitions)\n"
    "  --port-file FILE     also write the first broker's port and a newline to FILE\n"
    "                       once the cluster is ready\n"
    "  --help               show this help\n"
    "\n"
    "Inspect it with kcat:  kcat -b <address> -L      (topics and partitions)\n"
    "                       kcat -b <address> -C -t order-events -f '%k %h %s\\n' -e\n";

struct kmock_topic {
    char name[KMOCK_NAME_MAX + 1];
    int partitions;
};

struct kmock_args {
    int brokers;
    const char *port_file;
    struct kmock_topic topics[KMOCK_TOPICS_MAX];
    size_t n_topics;
};

/* Set by the signal handler, on any thread (hence atomic); the main loop polls it. */
static atomic_int kmock_stop;

static void on_signal(int sig)
{
    SF_UNUSED(sig);
    kmock_stop = 1;
}

/* Parses "NAME:PARTS" into t. Returns false with a message on stderr. */
static bool parse_topic(const char *spec, struct kmock_topic *t)
{
    const char *colon = strrchr(spec, ':');
    int64_t parts;
    size_t name_len;

    if (colon == NULL || colon == spec) {
        fprintf(stderr, "sagafeed-kafka-mock: --topic wants NAME:PARTS, got '%s'\n", spec);
        return false;
    }
    name_len = (size_t)(colon - spec);
    if (name_len > KMOCK_NAME_MAX) {
        fprintf(stderr, "sagafeed-kafka-mock: topic name longer than %d bytes\n", KMOCK_NAME_MAX);
        return false;
    }
    if (sf_parse_i64(colon + 1, 1, 1000, &parts) != SF_OK) {
        fprintf(stderr, "sagafeed-kafka-mock: partitions of '%s' must be 1..1000\n", spec);
        return false;
    }
    memcpy(t->name, spec, name_len);
    t->name[name_len] = '\0';
    t->partitions = (int)parts;
    return true;
}

/* Returns 0 when parsed, 1 after --help, 2 on bad usage (message printed). */
static int parse_args(int argc, char **argv, struct kmock_args *a)
{
    enum { OPT_BROKERS = 1, OPT_TOPIC, OPT_PORT_FILE, OPT_HELP };
    static const struct option longopts[] = {
        {"brokers", required_argument, NULL, OPT_BROKERS},
        {"topic", required_argument, NULL, OPT_TOPIC},
        {"port-file", required_argument, NULL, OPT_PORT_FILE},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    int64_t n;
    int c;

    a->brokers = 1;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_BROKERS:
            if (sf_parse_i64(optarg, 1, 16, &n) != SF_OK) {
                fprintf(stderr, "sagafeed-kafka-mock: --brokers must be 1..16\n");
                return 2;
            }
            a->brokers = (int)n;
            break;
        case OPT_TOPIC:
            if (a->n_topics == KMOCK_TOPICS_MAX) {
                fprintf(stderr, "sagafeed-kafka-mock: at most %d --topic options\n",
                        KMOCK_TOPICS_MAX);
                return 2;
            }
            if (!parse_topic(optarg, &a->topics[a->n_topics]))
                return 2;
            a->n_topics++;
            break;
        case OPT_PORT_FILE:
            a->port_file = optarg;
            break;
        case OPT_HELP:
            fputs(usage, stdout);
            return 1;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sagafeed-kafka-mock: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return 0;
}

/*
 * Writes the port of the first "host:port" in bootstraps to path through a
 * temporary file and rename, so a reader never sees a partial line.
 */
static bool write_port_file(const char *path, const char *bootstraps)
{
    char tmp[4096], line[32];
    const char *colon, *end;
    size_t port_len;
    int fd, n;
    bool ok;

    end = strchr(bootstraps, ',');
    if (end == NULL)
        end = bootstraps + strlen(bootstraps);
    colon = memrchr(bootstraps, ':', (size_t)(end - bootstraps));
    if (colon == NULL)
        return false;
    port_len = (size_t)(end - colon - 1);
    n = snprintf(line, sizeof(line), "%.*s\n", (int)port_len, colon + 1);
    if (n < 0 || (size_t)n >= sizeof(line))
        return false;
    n = snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return false;
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return false;
    ok = write(fd, line, strlen(line)) == (ssize_t)strlen(line);
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) != 0)
        ok = false;
    if (!ok)
        (void)unlink(tmp);
    return ok;
}

int main(int argc, char **argv)
{
    struct kmock_args a;
    char errstr[512];
    rd_kafka_conf_t *conf = NULL;
    rd_kafka_t *rk = NULL;
    rd_kafka_mock_cluster_t *mc = NULL;
    struct sigaction sa;
    const char *bootstraps;
    size_t i;
    int rc = 1;

    memset(&a, 0, sizeof(a));
    switch (parse_args(argc, argv, &a)) {
    case 0:
        break;
    case 1:
        return 0;
    default:
        return 2;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)sigaction(SIGINT, &sa, NULL);

    /* The cluster needs an rd_kafka_t for its bookkeeping; it never produces. */
    conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "sagafeed-kafka-mock: %s\n", errstr);
        goto out;
    }
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (rk == NULL) {
        fprintf(stderr, "sagafeed-kafka-mock: cannot create a client handle: %s\n", errstr);
        goto out;
    }
    conf = NULL; /* owned by rk now */
    mc = rd_kafka_mock_cluster_new(rk, a.brokers);
    if (mc == NULL) {
        fprintf(stderr, "sagafeed-kafka-mock: cannot start the mock cluster\n");
        goto out;
    }
    for (i = 0; i < a.n_topics; i++) {
        rd_kafka_resp_err_t e =
            rd_kafka_mock_topic_create(mc, a.topics[i].name, a.topics[i].partitions, 1);
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
            fprintf(stderr, "sagafeed-kafka-mock: cannot create topic %s: %s\n", a.topics[i].name,
                    rd_kafka_err2str(e));
            goto out;
        }
    }
    bootstraps = rd_kafka_mock_cluster_bootstraps(mc);
    printf("%s\n", bootstraps);
    if (fflush(stdout) != 0)
        goto out;
    if (a.port_file != NULL && !write_port_file(a.port_file, bootstraps)) {
        fprintf(stderr, "sagafeed-kafka-mock: cannot write --port-file %s: %s\n", a.port_file,
                strerror(errno));
        goto out;
    }
    while (!kmock_stop)
        (void)usleep(100 * 1000);
    rc = 0;
out:
    if (mc != NULL)
        rd_kafka_mock_cluster_destroy(mc);
    if (rk != NULL)
        rd_kafka_destroy(rk);
    if (conf != NULL)
        rd_kafka_conf_destroy(conf);
    return rc;
}
