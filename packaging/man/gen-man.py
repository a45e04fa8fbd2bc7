#!/usr/bin/env python3
"""Generates the man pages from the programs' own --help texts and from
docs/configuration.md, so a page can never say something the binary does not:

  sagafeed(1)      `sagafeed --help`, then `sagafeed CMD --help` for every
                   command that the top-level help lists under "Commands:"
  cosmolite(1)     `cosmolite --help`
  sagafeed-kafka-mock(1)  `sagafeed-kafka-mock --help`
  sagafeed.cfg(5)  docs/configuration.md (Markdown subset: headings, tables,
                   lists, code blocks, inline code, links)

Usage: gen-man.py --sagafeed BIN --cosmolite BIN --kafka-mock BIN --config-doc MD
                  --version V --out DIR
Writes DIR/sagafeed.1, DIR/cosmolite.1, DIR/sagafeed-kafka-mock.1, DIR/sagafeed.cfg.5. Exit status 1
with a message naming the program or file when a help text cannot be read or
parsed (an unknown layout is an error, not a silently worse page).
"""
import argparse
import datetime
import os
import re
import subprocess
import sys


class GenError(Exception):
    pass


def esc(s):
    """Plain text -> roff text (backslashes, dashes), inline `code` in bold."""
    s = s.replace("\\", "\\e").replace("-", "\\-")
    s = re.sub(r"`([^`]+)`", r"\\fB\1\\fR", s)
    return s


def line(s):
    """A roff text line: one starting with . or ' would be a request."""
    return "\\&" + s if s[:1] in (".", "'") else s


def run_help(argv):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GenError(f"{' '.join(argv)}: {e}")
    if r.returncode != 0 or not r.stdout.startswith("Usage:"):
        raise GenError(f"{' '.join(argv)}: exit {r.returncode}, no usage on stdout:\n{r.stderr}")
    return r.stdout


# "  TERM   description": the term runs to the line's last gap of 2+ spaces
# ("  GET    /_admin/faults    list fault rules" has a two-word term).
ITEM = re.compile(r"^(  +)(\S.*\S|\S)(?:\s{2,}(\S.*?))?$")
ITEM_LAST_GAP = re.compile(r"^(  +)(\S.*\S|\S)\s{2,}(\S(?:(?!\s{2}).)*)$")


def help_to_roff(text, section_for_heading=".SS"):
    """A --help text (after its Usage lines) as roff paragraphs and .TP lists.

    Layout understood: prose paragraphs; "Heading:" lines followed by
    indented "  TERM   description" items whose continuation lines are
    indented further; indented lines without a description column
    continue the item above (or stand alone as an indented paragraph).
    """
    out = []
    blocks = re.split(r"\n\s*\n", text.strip("\n"))
    for block in blocks:
        lines = block.split("\n")
        if not lines[0].startswith(" ") and lines[0].endswith(":") and len(lines) == 1:
            out.append(f"{section_for_heading} {esc(lines[0][:-1])}")
            continue
        if not lines[0].startswith(" ") and re.search(r"\S {2,}\S", lines[0]):
            # laid out in columns by hand ("Inspect it with kcat:  kcat ..."): keep it so
            out += [".PP", ".nf"] + [line(esc(ln)) for ln in lines] + [".fi"]
            continue
        i = 0
        if not lines[0].startswith(" ") and lines[0].endswith(":"):
            out.append(f"{section_for_heading} {esc(lines[0][:-1])}")
            i = 1
        if all(not ln.startswith(" ") for ln in lines[i:]):
            out.append(".PP")
            out.extend(line(esc(ln)) for ln in lines[i:])
            continue
        desc_col = None
        for ln in lines[i:]:
            if not ln.startswith(" "):
                out.append(".PP")
                out.append(line(esc(ln)))
                desc_col = None
                continue
            m = ITEM_LAST_GAP.match(ln) or ITEM.match(ln)
            indent = len(ln) - len(ln.lstrip(" "))
            if desc_col is not None and indent >= desc_col - 1:
                out.append(line(esc(ln.strip())))
            elif m and m.group(3):
                out.append(".TP")
                out.append(line("\\fB" + esc(m.group(2)) + "\\fR"))
                out.append(line(esc(m.group(3))))
                desc_col = ln.index(m.group(3))
            elif desc_col is not None and len(ln) > desc_col and ln[desc_col - 1] == " ":
                # a term that fills its column: "  --drain-timeout D how long..."
                out.append(".TP")
                out.append(line("\\fB" + esc(ln[:desc_col].strip()) + "\\fR"))
                out.append(line(esc(ln[desc_col:].strip())))
            elif desc_col is not None:
                out.append(line(esc(ln.strip())))
            else:
                out.append(".TP")
                out.append(line("\\fB" + esc(ln.strip()) + "\\fR"))
                desc_col = indent + 2
    return out


def split_usage(text, prog):
    """(synopsis lines, the rest) of a help text that starts with Usage:."""
    lines = text.split("\n")
    syn = []
    while lines and (lines[0].startswith("Usage: ") or lines[0].startswith("       " + prog)):
        syn.append(lines.pop(0).replace("Usage: ", "", 1).strip())
        # a long synopsis goes on, indented, on the next lines
        while lines and lines[0].startswith(" ") and not lines[0].strip().startswith(prog):
            syn.append("    " + lines.pop(0).strip())
    if not syn:
        raise GenError(f"{prog}: help text has no Usage line")
    return syn, "\n".join(lines)


def header(name, section, version, date, title):
    manual = "File formats" if section == "5" else "sagafeed manual"
    return [
        '.\\" Generated by packaging/man/gen-man.py from ' + title + "; do not edit.",
        ".TH " + esc(name.upper()) + f' {section} "{date}" "sagafeed {version}" "{manual}"',
        # option and setting names must stay whole: no hyphenation, ragged right
        ".nh",
        ".ad l",
    ]


def synopsis(syn):
    out = [".SH SYNOPSIS", ".nf"]
    out.extend(line(esc(s)) for s in syn)
    out.append(".fi")
    return out


def commands_of(top_help):
    """The command names listed under "Commands:" of `sagafeed --help`."""
    m = re.search(r"^Commands:\n((?:  .*\n|\s*\n)*?)(?:\n\S|\Z)", top_help + "\n\n", re.M)
    if not m:
        raise GenError("sagafeed --help lists no Commands:")
    names = []
    for ln in m.group(1).split("\n"):
        mm = re.match(r"^  ([a-z][a-z|-]*)", ln)
        if mm:
            for n in mm.group(1).split("|"):
                if n not in names:
                    names.append(n)
    if not names:
        raise GenError("sagafeed --help: no command under Commands:")
    return names


def page_sagafeed(bin_, version, date):
    top = run_help([bin_, "--help"])
    syn, rest = split_usage(top, "sagafeed")
    desc, _, _ = rest.partition("\nCommands:\n")
    out = header("sagafeed", "1", version, date, "sagafeed --help")
    out += [".SH NAME", "sagafeed \\- a change\\-feed driven saga processor for Azure Cosmos DB"]
    out += synopsis(syn + ["sagafeed --version"])
    out += [".SH DESCRIPTION"] + help_to_roff(desc)
    out += [".PP", "Every command is described below, from its own \\fB\\-\\-help\\fR text."]
    out.append(".SH COMMANDS")
    seen = {}
    for cmd in commands_of(top):
        text = run_help([bin_, cmd, "--help"])
        if text in seen.values():
            continue  # pause and resume share one text
        seen[cmd] = text
        csyn, crest = split_usage(text, "sagafeed")
        out.append(f".SS {esc(cmd)}")
        out.append(".nf")
        out.extend(line("\\fB" + esc(s) + "\\fR") for s in csyn)
        out.append(".fi")
        out += help_to_roff(crest, ".PP\n.B")
    out = [x for x in "\n".join(out).split("\n")]
    out += [
        ".SH FILES",
        ".TP", "\\fI/etc/sagafeed/sagafeed.cfg\\fR",
        "the configuration the systemd unit runs with (see \\fBsagafeed.cfg\\fR(5))",
        ".TP", "\\fI/etc/sagafeed/sagafeed.env\\fR",
        "SAGAFEED_* settings and the account key variable for the unit",
        ".TP", "\\fI/usr/share/doc/sagafeed/examples/\\fR",
        "complete, commented example configurations",
        ".SH EXIT STATUS",
        "0 on success, 1 when the work failed, 2 on bad usage.",
        ".SH SEE ALSO",
        "\\fBsagafeed.cfg\\fR(5), \\fBcosmolite\\fR(1), \\fBsystemctl\\fR(1);",
        "/usr/share/doc/sagafeed/operations.md (the runbook: metrics, logs, alerts)",
    ]
    return out


def page_tool(prog, bin_, version, date, what, see_also):
    """A one-command program's page: NAME, SYNOPSIS and DESCRIPTION from its --help."""
    text = run_help([bin_, "--help"])
    syn, rest = split_usage(text, prog)
    out = header(prog, "1", version, date, prog + " --help")
    out += [".SH NAME", esc(prog) + " \\- " + esc(what)]
    out += synopsis(syn)
    out += [".SH DESCRIPTION"] + help_to_roff(rest)
    out += [".SH SEE ALSO", see_also]
    return out


def md_inline(s):
    s = re.sub(r"\[([^\]]+)\]\((https?://[^)]+)\)", r"\1 <\2>", s)
    s = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"\1", s)
    s = re.sub(r"\*\*([^*]+)\*\*", r"`\1`", s)
    return esc(s)


def md_cells(row):
    row = row.strip()
    if not (row.startswith("|") and row.endswith("|")):
        raise GenError(f"table row without outer pipes: {row}")
    # a pipe inside `code` is not a column separator
    cells, cur, code = [], "", False
    for c in row[1:-1]:
        if c == "`":
            code = not code
        if c == "|" and not code:
            cells.append(cur.strip())
            cur = ""
        else:
            cur += c
    cells.append(cur.strip())
    return cells


def page_config(md_path, version, date):
    try:
        text = open(md_path, encoding="utf-8").read()
    except OSError as e:
        raise GenError(f"{md_path}: {e}")
    out = header("sagafeed.cfg", "5", version, date, "docs/configuration.md")
    out += [".SH NAME", "sagafeed.cfg \\- the configuration file of sagafeed(1)", ".SH DESCRIPTION"]
    lines = text.split("\n")
    i = 0
    para = False
    while i < len(lines):
        ln = lines[i]
        n = i + 1
        if ln.startswith("# "):
            pass
        elif ln.startswith("## "):
            out.append(".SH " + md_inline(ln[3:]).upper().replace("\\FB", "\\fB").replace("\\FR", "\\fR"))
            para = False
        elif ln.startswith("### "):
            out.append(".SS " + md_inline(ln[4:]))
            para = False
        elif ln.startswith("```"):
            out += [".PP", ".RS 4", ".nf"]
            while n < len(lines) and not lines[n].startswith("```"):
                out.append(line(esc(lines[n]).replace("\\fB", "`").replace("\\fR", "`")))
                n += 1
            if n >= len(lines):
                raise GenError(f"{md_path}:{i + 1}: unclosed code block")
            out += [".fi", ".RE"]
            n += 1
            para = False
        elif ln.startswith("|"):
            head = md_cells(ln)
            if n >= len(lines) or not re.match(r"^\|[-|: ]+\|$", lines[n].strip()):
                raise GenError(f"{md_path}:{i + 1}: table without a separator row")
            n += 1
            while n < len(lines) and lines[n].startswith("|"):
                cells = md_cells(lines[n])
                if len(cells) != len(head):
                    raise GenError(f"{md_path}:{n + 1}: {len(cells)} cells, the header has {len(head)}")
                out += [".TP", line("\\fB" + md_inline(cells[0]).replace("\\fB", "").replace("\\fR", "") + "\\fR")]
                if len(cells) == 2:
                    out.append(line(md_inline(cells[1])))
                else:
                    extra = "; ".join(f"{h}: {c}" for h, c in zip(head[1:-1], cells[1:-1]))
                    out.append(line(md_inline(f"({extra}) {cells[-1]}")))
                n += 1
            para = False
        elif re.match(r"^(\*|-|\d+\.) ", ln):
            m = re.match(r"^(\*|-|\d+\.) (.*)$", ln)
            out += [".IP " + ("\\(bu 2" if m.group(1) in "*-" else m.group(1) + " 4"), line(md_inline(m.group(2)))]
            while n < len(lines) and lines[n].startswith("  ") and lines[n].strip():
                if re.match(r"^\s+(\*|-) ", lines[n]):
                    sub = re.match(r"^\s+(?:\*|-) (.*)$", lines[n]).group(1)
                    out += [".RS 2", ".IP \\(en 2", line(md_inline(sub)), ".RE"]
                else:
                    out.append(line(md_inline(lines[n].strip())))
                n += 1
            para = True
        elif not ln.strip():
            para = False
        else:
            if not para:
                out.append(".PP")
                para = True
            out.append(line(md_inline(ln.strip())))
        i = n
    out += [".SH SEE ALSO", "\\fBsagafeed\\fR(1), \\fBcosmolite\\fR(1);",
            "/usr/share/doc/sagafeed/examples/ (complete, commented configurations)"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sagafeed", required=True)
    ap.add_argument("--cosmolite", required=True)
    ap.add_argument("--kafka-mock", required=True)
    ap.add_argument("--config-doc", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    # A fixed date keeps the pages reproducible (SOURCE_DATE_EPOCH when set).
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0") or 0)
    date = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%d") \
        if epoch else ""
    try:
        pages = {
            "sagafeed.1": page_sagafeed(a.sagafeed, a.version, date),
            "cosmolite.1": page_tool("cosmolite", a.cosmolite, a.version, date,
                                     "a durable Azure Cosmos DB compatible local server",
                                     "\\fBsagafeed\\fR(1), \\fBsagafeed.cfg\\fR(5)"),
            "sagafeed-kafka-mock.1": page_tool("sagafeed-kafka-mock", a.kafka_mock, a.version, date,
                                               "librdkafka's mock Kafka cluster as a program",
                                               "\\fBsagafeed\\fR(1), \\fBkcat\\fR(1)"),
            "sagafeed.cfg.5": page_config(a.config_doc, a.version, date),
        }
    except GenError as e:
        print(f"gen-man.py: {e}", file=sys.stderr)
        return 1
    os.makedirs(a.out, exist_ok=True)
    for name, lines in pages.items():
        tmp = os.path.join(a.out, name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, os.path.join(a.out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
