#!/usr/bin/env python3
"""The Prometheus alert rules (packaging/prometheus/sagafeed.rules.yml) with
Debian's promtool: `promtool check rules` (syntax, PromQL, templates) and
`promtool test rules sagafeed.rules.test.yml` (each alert fires on the series
it guards and stays silent on healthy ones). Also: the alerts the runbook
promises exist, each has a test case and a runbook_url whose anchor is a
heading of docs/operations.md.

Environment: SF_SOURCE_DIR; PROMTOOL (default `promtool` on PATH).
Exit status 0 when every check passed, 1 otherwise, 77 without promtool.
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import SRC, check, failures  # noqa: E402

DIR = os.path.join(SRC, "packaging", "prometheus")
WANT = ["SagafeedRangeStalled", "SagafeedFeedRangeStuck", "SagafeedLagHigh", "SagafeedParkedItems", "SagafeedFleetPausedTooLong",
        "SagafeedThrottled", "SagafeedKafkaRelayBehind", "SagafeedInstanceDown"]


def slug(heading):
    """The anchor GitHub (and most Markdown renderers) give a heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def main():
    promtool = os.environ.get("PROMTOOL") or shutil.which("promtool")
    rules = open(os.path.join(DIR, "sagafeed.rules.yml"), encoding="utf-8").read()
    tests = open(os.path.join(DIR, "sagafeed.rules.test.yml"), encoding="utf-8").read()
    ops = open(os.path.join(SRC, "docs", "operations.md"), encoding="utf-8").read()
    anchors = {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", ops, re.M)}
    alerts = re.findall(r"^\s*- alert: (\S+)", rules, re.M)
    check(sorted(alerts) == sorted(WANT), f"alerts {alerts}, want {WANT}")
    blocks = re.split(r"^\s*- alert: ", rules, flags=re.M)[1:]
    for name, block in zip(alerts, blocks):
        m = re.search(r'runbook_url: "file:///usr/share/doc/sagafeed/operations\.md#([\w-]+)"', block)
        if check(m is not None, f"{name}: no runbook_url into operations.md"):
            check(m.group(1) in anchors, f"{name}: runbook anchor #{m.group(1)} is no heading of docs/operations.md")
        check(re.search(r"^\s+for: \d+[smh]", block, re.M) is not None, f"{name}: no `for:` (would page on one blip)")
        check(f"alertname: {name}" in tests, f"{name}: no case in sagafeed.rules.test.yml")
    if not promtool:
        print("SKIP: no promtool (apt-get install prometheus): the rules were not run through it")
        return 1 if failures else 77
    r = subprocess.run([promtool, "check", "rules", "sagafeed.rules.yml"], cwd=DIR, capture_output=True,
                       text=True, timeout=60)
    print(r.stdout.strip(), r.stderr.strip())
    check(r.returncode == 0 and f"SUCCESS: {len(WANT)} rules found" in r.stdout, "promtool check rules failed")
    r = subprocess.run([promtool, "test", "rules", "sagafeed.rules.test.yml"], cwd=DIR, capture_output=True,
                       text=True, timeout=60)
    print(r.stdout.strip(), r.stderr.strip())
    check(r.returncode == 0 and "SUCCESS" in r.stdout, "promtool test rules failed")
    print(f"{len(failures)} failure(s)" if failures else "alert rules: all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
