/*
 * cli_opt.h - the one option parser of sagafeed's commands, in the spirit of
 * git's parse-options: each command describes its options in a table (long
 * name, short letter, kind, destination) and cli_opt_parse does the rest.
 *
 * What every command used to hand-roll is done here once, with one set of
 * texts and exit statuses: -h/--help prints the command's usage on stdout
 * (exit 0); an unknown option, a missing argument, a missing required
 * option or a wrong number of operands prints it on stderr (exit 2); a value
 * that is not of its kind (a duration, an integer out of its bounds, a log
 * level) is named: "sagafeed CMD: bad --NAME 'VALUE'" (exit 2).
 */
#ifndef CLI_OPT_H
#define CLI_OPT_H

#include "common/sf_base.h"

enum cli_opt_kind {
    CLI_OPT_KIND_FLAG,     /* no argument: *flag = true */
    CLI_OPT_KIND_STRING,   /* *str = the argument (borrowed from argv) */
    CLI_OPT_KIND_DURATION, /* *num = the argument in ms (sf_parse_duration_ms: 10s, 250ms) */
    CLI_OPT_KIND_INT,      /* *num = the argument, an integer in min..max */
    CLI_OPT_KIND_LEVEL,    /* *str = the argument, a log level (sf_log_level_parse) */
};

/* One option of a command. Build rows with the CLI_OPT_* macros; end the table with
   CLI_OPT_END. */
struct cli_opt {
    const char *name; /* the long name, without "--"; NULL ends the table */
    char letter;      /* the short option letter, 0 for none ('h' is --help's) */
    enum cli_opt_kind kind;
    bool required;    /* absent: a usage error */
    bool *flag;       /* CLI_OPT_KIND_FLAG */
    const char **str; /* CLI_OPT_KIND_STRING, CLI_OPT_KIND_LEVEL */
    int64_t *num;     /* CLI_OPT_KIND_DURATION, CLI_OPT_KIND_INT */
    int64_t min, max; /* CLI_OPT_KIND_INT bounds, both inclusive */
};

/* The most options one table may have (--help not counted); more is a programming error. */
#define CLI_OPT_MAX 16

#define CLI_OPT_FLAG(n, l, dest)                                                                   \
    {                                                                                              \
        .name = (n), .letter = (l), .kind = CLI_OPT_KIND_FLAG, .flag = (dest)                      \
    }
#define CLI_OPT_STRING(n, l, dest)                                                                 \
    {                                                                                              \
        .name = (n), .letter = (l), .kind = CLI_OPT_KIND_STRING, .str = (dest)                     \
    }
/* A string option the command cannot go without (-c FILE, replay's --from and --to). */
#define CLI_OPT_REQUIRED(n, l, dest)                                                               \
    {                                                                                              \
        .name = (n), .letter = (l), .kind = CLI_OPT_KIND_STRING, .required = true, .str = (dest)   \
    }
#define CLI_OPT_DURATION(n, dest)                                                                  \
    {                                                                                              \
        .name = (n), .kind = CLI_OPT_KIND_DURATION, .num = (dest)                                  \
    }
#define CLI_OPT_INT(n, dest, lo, hi)                                                               \
    {                                                                                              \
        .name = (n), .kind = CLI_OPT_KIND_INT, .num = (dest), .min = (lo), .max = (hi)             \
    }
#define CLI_OPT_LEVEL(n, dest)                                                                     \
    {                                                                                              \
        .name = (n), .kind = CLI_OPT_KIND_LEVEL, .str = (dest)                                     \
    }
#define CLI_OPT_END                                                                                \
    {                                                                                              \
        .name = NULL                                                                               \
    }

/* cli_opt_parse's "go on": the options were good and are stored. */
#define CLI_OPT_GO (-1)

/*
 * Parses argv[first..argc-1] of command cmd (the name in messages, e.g. "run"
 * or "leases") against opts, plus -h/--help. Options and operands may mix, as
 * with getopt_long; "--" ends the options. nargs is the exact number of
 * operands the command takes, or -1 for any (the command checks them).
 * Destinations of absent options keep their values (the defaults).
 *
 * Returns CLI_OPT_GO with *ret_next (may be NULL) the index of the first
 * operand in argv;
 * or the command's exit status, its reason printed: 0 after printing usage on
 * stdout for --help, 2 after printing a usage error (usage on stderr, or the
 * bad value). Uses getopt_long, so its globals: main thread only.
 */
int cli_opt_parse(const char *cmd, const char *usage, const struct cli_opt *opts, int first,
                  int nargs, int argc, char **argv, int *ret_next);

/*
 * For a command whose first operand is a verb (saga show, leases export):
 * CLI_OPT_GO when argv[1] is one of verbs (NULL-terminated); else 0 after
 * printing usage on stdout when argv[1] is -h or --help, 2 after printing it
 * on stderr otherwise.
 */
int cli_opt_verb(const char *usage, int argc, char **argv, const char *const *verbs);

/* Prints usage on stdout for status 0 (asked for), on stderr otherwise; returns status. */
int cli_opt_usage(const char *usage, int status);

#endif
