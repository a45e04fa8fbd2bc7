#!/usr/bin/env python3
"""The man pages of the build (packaging/man/gen-man.py, run at build time
from the binaries' --help): `man -l` renders each without a warning, and
they say what the binaries say now:

  sagafeed(1)      a section per command `sagafeed --help` lists, holding
                   every option that the command's own --help names
  cosmolite(1)     every option of `cosmolite --help`
  sagafeed-kafka-mock(1)  every option of its --help
  sagafeed.cfg(5)  every key of docs/configuration.md's tables

Usage: test_man.py MANDIR. Environment: SF_SOURCE_DIR, SF_SAGAFEED_BIN,
SF_COSMOLITE_BIN, SF_KAFKA_MOCK_BIN. Exit status 0 when every check passed, 1 otherwise, 77
when man is not installed.
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import SRC, check, failures  # noqa: E402



def render(path):
    """The page as plain text (man -l), or None; warnings are failures."""
    env = {**os.environ, "MANWIDTH": "100", "MANPAGER": "cat", "PAGER": "cat", "LC_ALL": "C.UTF-8"}
    r = subprocess.run(["man", "--warnings", "-l", path], capture_output=True, text=True, env=env, timeout=60)
    if not check(r.returncode == 0, f"man -l {path}: exit {r.returncode}: {r.stderr}"):
        return None
    check(r.stderr.strip() == "", f"man -l {path} warns:\n{r.stderr}")
    text = re.sub(r".\x08", "", r.stdout)  # overstrike bold/underline, if any
    return text.replace("\u2010", "-").replace("\u2212", "-")


def helptext(argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, f"{' '.join(argv)}: exit {r.returncode}")
    return r.stdout


def options(text):
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    mandir = sys.argv[1]
    if shutil.which("man") is None:
        print("SKIP: man is not installed (apt-get install man-db): the pages were not rendered")
        return 77
    sagafeed, cosmolite = os.environ["SF_SAGAFEED_BIN"], os.environ["SF_COSMOLITE_BIN"]
    kmock = os.environ["SF_KAFKA_MOCK_BIN"]
    pages = {n: render(os.path.join(mandir, n))
             for n in ("sagafeed.1", "cosmolite.1", "sagafeed-kafka-mock.1", "sagafeed.cfg.5")}
    if any(v is None for v in pages.values()):
        return 1
    for n, t in pages.items():
        print(f"{n}: {len(t.splitlines())} lines rendered")
        check(re.search(r"^NAME\n", t, re.M) and re.search(r"^SEE ALSO\n", t, re.M), f"{n}: no NAME or SEE ALSO")

    # sagafeed(1): the commands of the top-level help, each with its options
    top = helptext([sagafeed, "--help"])
    block = top.split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]
    cmds = []
    for ln in block.split("\n"):
        m = re.match(r"^  ([a-z][a-z|-]*)", ln)
        if m:
            cmds += [c for c in m.group(1).split("|") if c not in cmds]
    check(len(cmds) >= 10, f"sagafeed --help lists only {cmds}")
    page = pages["sagafeed.1"]
    sections = dict(re.findall(r"^   (\S+)\n(.*?)(?=^   \S|^[A-Z]|\Z)", page.split("\nCOMMANDS\n", 1)[-1], re.M | re.S))
    for c in cmds:
        h = helptext([sagafeed, c, "--help"])
        # pause and resume share one text, under the first of them
        sec = sections.get(c) or next((s for s in sections.values() if f"sagafeed {c} " in s), None)
        if not check(sec is not None, f"sagafeed(1) has no section for `{c}`"):
            continue
        for o in options(h) - {"--help"}:
            check(o in sec, f"sagafeed(1), section {c}: option {o} of `sagafeed {c} --help` missing")
    check("--version" in page, "sagafeed(1) does not mention --version")

    # cosmolite(1)
    for o in options(helptext([cosmolite, "--help"])):
        check(o in pages["cosmolite.1"], f"cosmolite(1): option {o} of `cosmolite --help` missing")

    # sagafeed-kafka-mock(1)
    for o in options(helptext([kmock, "--help"])):
        check(o in pages["sagafeed-kafka-mock.1"], f"sagafeed-kafka-mock(1): option {o} missing")

    # sagafeed.cfg(5): the keys of the configuration reference's tables
    doc = open(os.path.join(SRC, "docs", "configuration.md"), encoding="utf-8").read()
    keys = set(re.findall(r"^\| `([a-z_]+)` \|", doc, re.M))
    check(len(keys) > 30, f"docs/configuration.md: only {len(keys)} keys found")
    cfg_page = pages["sagafeed.cfg.5"]
    for k in sorted(keys):
        check(re.search(rf"^\s+{re.escape(k)}\b", cfg_page, re.M) is not None, f"sagafeed.cfg(5): key {k} missing")
    print(f"{len(failures)} failure(s)" if failures else
          f"man pages: {len(cmds)} commands, {len(keys)} configuration keys: all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
