/*
 * cli_opt.c - the option parser of sagafeed's commands (cli_opt.h).
 */
#include "common/sf_base.h"

#include <getopt.h>

#include "cli/cli_opt.h"
#include "common/sf_log.h"
#include "common/sf_parse.h"

/* getopt_long's value for the long-only option at index i of a table (above any letter). */
#define LONG_ONLY_BASE 256

int cli_opt_usage(const char *usage, int status)
{
    (void)fputs(usage, status == 0 ? stdout : stderr);
    return status;
}

/* Stores arg into o's destination; 0, or 2 after naming the bad value. */
static int opt_store(const char *cmd, const struct cli_opt *o, const char *arg)
{
    enum sf_log_level lvl;
    int64_t v;

    switch (o->kind) {
    case CLI_OPT_KIND_FLAG:
        *o->flag = true;
        return 0;
    case CLI_OPT_KIND_STRING:
        *o->str = arg;
        return 0;
    case CLI_OPT_KIND_LEVEL:
        if (!sf_log_level_parse(arg, &lvl))
            break;
        *o->str = arg;
        return 0;
    case CLI_OPT_KIND_DURATION:
        if (sf_parse_duration_ms(arg, &v) != SF_OK)
            break;
        *o->num = v;
        return 0;
    case CLI_OPT_KIND_INT:
        if (sf_parse_i64(arg, o->min, o->max, &v) != SF_OK) {
            if (o->max == INT64_MAX)
                (void)fprintf(stderr, "sagafeed %s: bad --%s '%s' (wants an integer >= %lld)\n",
                              cmd, o->name, arg, (long long)o->min);
            else
                (void)fprintf(stderr, "sagafeed %s: bad --%s '%s' (wants %lld..%lld)\n", cmd,
                              o->name, arg, (long long)o->min, (long long)o->max);
            return 2;
        }
        *o->num = v;
        return 0;
    }
    (void)fprintf(stderr, "sagafeed %s: bad --%s '%s'\n", cmd, o->name, arg);
    return 2;
}

int cli_opt_parse(const char *cmd, const char *usage, const struct cli_opt *opts, int first,
                  int nargs, int argc, char **argv, int *ret_next)
{
    struct option lo[CLI_OPT_MAX + 2];
    bool seen[CLI_OPT_MAX] = {false};
    char shorts[2 * CLI_OPT_MAX + 3]; /* "c:" per letter, then "h" */
    size_t n = 0, ns = 0;
    int c;

    for (; opts[n].name != NULL; n++) {
        if (n == CLI_OPT_MAX) {
            (void)fprintf(stderr, "sagafeed %s: more than %d options\n", cmd, CLI_OPT_MAX);
            return 2;
        }
        lo[n] = (struct option){
            opts[n].name, opts[n].kind == CLI_OPT_KIND_FLAG ? no_argument : required_argument, NULL,
            opts[n].letter != 0 ? opts[n].letter : LONG_ONLY_BASE + (int)n};
        if (opts[n].letter != 0) {
            shorts[ns++] = opts[n].letter;
            if (opts[n].kind != CLI_OPT_KIND_FLAG)
                shorts[ns++] = ':';
        }
    }
    lo[n] = (struct option){"help", no_argument, NULL, 'h'};
    lo[n + 1] = (struct option){NULL, 0, NULL, 0};
    shorts[ns++] = 'h';
    shorts[ns] = '\0';
    optind = first;
    while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
        size_t i = 0;
        int status;

        if (c == 'h')
            return cli_opt_usage(usage, 0);
        if (c >= LONG_ONLY_BASE)
            i = (size_t)(c - LONG_ONLY_BASE);
        else
            while (i < n && opts[i].letter != c)
                i++;
        if (i >= n) /* '?' or ':' after getopt_long named the problem */
            return cli_opt_usage(usage, 2);
        if ((status = opt_store(cmd, &opts[i], optarg)) != 0)
            return status;
        seen[i] = true;
    }
    for (size_t i = 0; i < n; i++)
        if (opts[i].required && !seen[i])
            return cli_opt_usage(usage, 2);
    if (nargs >= 0 && argc - optind != nargs)
        return cli_opt_usage(usage, 2);
    if (ret_next != NULL)
        *ret_next = optind;
    return CLI_OPT_GO;
}

int cli_opt_verb(const char *usage, int argc, char **argv, const char *const *verbs)
{
    if (argc >= 2) {
        for (size_t i = 0; verbs[i] != NULL; i++)
            if (strcmp(argv[1], verbs[i]) == 0)
                return CLI_OPT_GO;
        if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
            return cli_opt_usage(usage, 0);
    }
    return cli_opt_usage(usage, 2);
}
