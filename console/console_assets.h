/*
 * console_assets.h - the console's pages (console/ui/), embedded at build
 * time by embed_assets.cmake: no file and no network at run time.
 */
#ifndef CONSOLE_ASSETS_H
#define CONSOLE_ASSETS_H

#include <stddef.h>

struct console_asset {
    const char *name; /* "index.html", "app.js", ... (the path under /ui/) */
    const char *type; /* its Content-Type */
    const unsigned char *data;
    size_t len;
};

extern const struct console_asset console_assets[];
extern const size_t console_assets_n;

#endif
