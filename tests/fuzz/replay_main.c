/*
 * replay_main.c - runs a libFuzzer target over saved inputs, so every fuzz
 * corpus (seeds plus the crashers found so far) is replayed by the ordinary
 * test suite without clang or libFuzzer.
 *
 * Usage: <target>_replay <file-or-directory>...  Directories are read one
 * level deep in name order, so runs are repeatable. Fails when an argument
 * cannot be read or when no input was found at all (an empty corpus would
 * otherwise pass without testing anything). Crashes surface as the target's
 * own abort or sanitizer report.
 */
#include "common/sf_base.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

#define REPLAY_MAX_INPUT (4u * 1024 * 1024) /* larger files are a mistake, not an input */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t n = 0;
    int rc = -1;

    if (f == NULL) {
        fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    if ((buf = malloc(REPLAY_MAX_INPUT + 1)) == NULL) {
        fprintf(stderr, "replay: out of memory\n");
        goto out;
    }
    n = fread(buf, 1, REPLAY_MAX_INPUT + 1, f);
    if (ferror(f) || n > REPLAY_MAX_INPUT) {
        fprintf(stderr, "replay: cannot read %s (or it is over %u bytes)\n", path,
                REPLAY_MAX_INPUT);
        goto out;
    }
    /* Hand the target an exact-size copy so ASan catches reads past the input. */
    uint8_t *exact = malloc(n > 0 ? n : 1);
    if (exact == NULL)
        goto out;
    memcpy(exact, buf, n);
    (void)LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    rc = 0;
out:
    free(buf);
    fclose(f);
    return rc;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays every regular file in dir; returns the count, or -1 on error. */
static long replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char **names = NULL, path[4096];
    size_t n = 0, cap = 0;
    long done = 0;

    if (d == NULL) {
        fprintf(stderr, "replay: cannot open directory %s: %s\n", dir, strerror(errno));
        return -1;
    }
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (n == cap) {
            size_t ncap = cap == 0 ? 64 : cap * 2;
            char **nn = realloc(names, ncap * sizeof(*nn));
            if (nn == NULL)
                break;
            names = nn;
            cap = ncap;
        }
        if ((names[n] = strdup(de->d_name)) != NULL)
            n++;
    }
    closedir(d);
    qsort(names, n, sizeof(*names), name_cmp);
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        (void)snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (replay_file(path) != 0)
                done = -1;
            else if (done >= 0)
                done++;
        }
        free(names[i]);
    }
    free(names);
    return done;
}

int main(int argc, char **argv)
{
    long total = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s <corpus-file-or-directory>...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;
        long n;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        n = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : replay_file(argv[i]) == 0 ? 1 : -1;
        if (n < 0)
            return 1;
        total += n;
    }
    if (total == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        return 1;
    }
    printf("replayed %ld inputs\n", total);
    return 0;
}
