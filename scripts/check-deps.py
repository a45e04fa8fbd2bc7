#!/usr/bin/env python3
"""check-deps.py - every module's link line and includes against the table.

The allowed-dependency table is the "Modules" table of docs/architecture.md
(one row per top-level folder, last column "may use"), so the document and
the check cannot drift: to let a module use another, change the table.

For each folder in the table this reads every target_link_libraries() in its
CMakeLists.txt and *.cmake files, maps each library to a module or package
name (LIBS below) and fails when one is not in the row. It also fails when a
source file includes a header of a module the row does not allow
(#include "feed/feed.h" in outbox/), which is how an edge usually starts.

Usage: check-deps.py [--root DIR]   (DIR defaults to the repository root)
Every top-level folder holding C sources needs a row (or a place in an
"everything" row such as tests/, bench/). A "may use" entry is a bare name:
a note the check cannot enforce (the old "demo (the sagafeed binary only)")
is refused, so the table says exactly what is enforced.

Exit 0 and a summary line per module when clean; 1 with one line per
violation (file:line, what, why) otherwise; 2 when the table cannot be read
or says something the check cannot enforce.
"""
import argparse
import glob
import os
import re
import sys

# Link-line names -> the names the table uses. Our own libraries map to their folder.
LIBS = {
    "sf_common": "common",
    "sf_record": "record",
    "sf_config": "config",
    "sf_cosmos": "cosmos",
    "sf_feed": "feed",
    "sf_steps": "steps",
    "sf_outbox": "outbox",
    "sf_processor": "processor",
    "sf_demo": "demo",
    "sf_console": "console",
    "PkgConfig::JANSSON": "jansson",
    "PkgConfig::CURL": "libcurl",
    "OpenSSL::Crypto": "libcrypto",
    "PkgConfig::LIBCONFIG": "libconfig",
    "PkgConfig::RDKAFKA": "librdkafka",
    "PkgConfig::MHD": "libmicrohttpd",
    "PkgConfig::SQLITE": "sqlite",
    # The C library and its parts (threads, libm, libdl) are always allowed.
    "Threads::Threads": "libc",
    "m": "libc",
    "${CMAKE_DL_LIBS}": "libc",
}
KEYWORDS = {"PUBLIC", "PRIVATE", "INTERFACE"}
ALWAYS = {"libc"}


NAME = re.compile(r"^[a-z0-9_-]+$")


def read_table(path):
    """The Modules table: ({folder: set(allowed)}, {folders of 'everything' rows}, [problems]).

    A "may use" entry is a bare name (a module or a package); anything else
    (a note in parentheses, an exception for one target) is a problem: the
    check cannot enforce it, so the table may not say it.
    """
    table, everything, problems = {}, set(), []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r"^\|\s*((?:`[a-z_-]+/`(?:,\s*)?)+)\s*\|.*\|([^|]*)\|\s*$", line)
            if not m:
                continue
            folders = re.findall(r"`([a-z_-]+)/`", m.group(1))
            uses = [u.strip() for u in m.group(2).split(",")]
            if uses == ["everything"]:
                everything.update(folders)
                continue
            for u in uses:
                if not NAME.match(u):
                    problems.append(f"docs/architecture.md:{n}: {folders[0]}/ may use '{u}', "
                                    f"which is not a module or package name: the check "
                                    f"enforces names only (say the rest under \"owns\")")
            for folder in folders:
                table[folder] = {u for u in uses if NAME.match(u)}
    return table, everything, problems


def code_folders(root):
    """Top-level folders holding C sources (build trees and hidden folders aside)."""
    for d in sorted(os.listdir(root)):
        path = os.path.join(root, d)
        if d.startswith((".", "build")) or not os.path.isdir(path):
            continue
        if glob.glob(os.path.join(path, "**", "*.[ch]"), recursive=True):
            yield d


def link_lines(folder):
    """(file, line, target, [libs]) for each target_link_libraries() under folder."""
    files = [os.path.join(folder, "CMakeLists.txt")]
    files += sorted(glob.glob(os.path.join(folder, "**", "*.cmake"), recursive=True))
    files += sorted(glob.glob(os.path.join(folder, "*", "CMakeLists.txt")))
    for path in files:
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        # Comments out, keeping line numbers.
        text = re.sub(r"#[^\n]*", "", text)
        for m in re.finditer(r"target_link_libraries\s*\(([^)]*)\)", text):
            words = m.group(1).split()
            line = text.count("\n", 0, m.start()) + 1
            yield path, line, words[0], [w for w in words[1:] if w not in KEYWORDS]


def targets_of(folder):
    """The targets a module defines itself (emulator's emu_* parts link each other)."""
    own = set()
    for path in glob.glob(os.path.join(folder, "**", "*"), recursive=True):
        if path.endswith((".cmake", "CMakeLists.txt")):
            with open(path, encoding="utf-8") as f:
                own.update(re.findall(r"add_(?:library|executable)\s*\(\s*([A-Za-z0-9_.-]+)",
                                      f.read()))
    return own


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    root = os.path.abspath(ap.parse_args().root)
    table_path = os.path.join(root, "docs", "architecture.md")
    try:
        table, everything, problems = read_table(table_path)
    except OSError as e:
        print(f"check-deps: cannot read {table_path}: {e.strerror}", file=sys.stderr)
        return 2
    if not table:
        print(f"check-deps: {table_path}: no module table (| `folder/` | owns | may use |)",
              file=sys.stderr)
        return 2
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        return 2
    bad = []
    for d in code_folders(root):
        if d not in table and d not in everything:
            bad.append(f"{d}/: holds C sources but has no row in docs/architecture.md's module "
                       f"table: add one")
    for mod in sorted(table):
        folder = os.path.join(root, mod)
        if not os.path.isdir(folder):
            bad.append(f"docs/architecture.md: module {mod}/ is in the table but not in the tree")
            continue
        allowed = table[mod] | ALWAYS | {mod}
        own = targets_of(folder)
        used = set()
        for path, line, target, libs in link_lines(folder):
            rel = os.path.relpath(path, root)
            for lib in libs:
                if lib in own:
                    continue
                name = LIBS.get(lib)
                if name is None:
                    bad.append(f"{rel}:{line}: {target} links {lib}, which the check does not "
                               f"know: add it to LIBS in scripts/check-deps.py")
                elif name not in allowed:
                    bad.append(f"{rel}:{line}: {target} links {lib} ({name}), which "
                               f"docs/architecture.md does not allow {mod}/ "
                               f"(may use: {', '.join(sorted(table[mod]))})")
                else:
                    used.add(name)
        for path in sorted(glob.glob(os.path.join(folder, "**", "*.[ch]"), recursive=True)):
            with open(path, encoding="utf-8", errors="replace") as f:
                for n, text in enumerate(f, 1):
                    m = re.match(r'\s*#\s*include\s+"([a-z_-]+)/', text)
                    if m and m.group(1) in table and m.group(1) not in allowed:
                        bad.append(f"{os.path.relpath(path, root)}:{n}: includes "
                                   f"{m.group(1)}/, which docs/architecture.md does not "
                                   f"allow {mod}/")
        print(f"{mod}/: links {', '.join(sorted(used - {mod} - ALWAYS)) or 'nothing'}")
    for b in bad:
        print(b, file=sys.stderr)
    if bad:
        print(f"check-deps: {len(bad)} edge(s) outside the table", file=sys.stderr)
        return 1
    print(f"check-deps: {len(table)} modules match docs/architecture.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
