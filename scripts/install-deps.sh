#!/usr/bin/env bash
# Installs what sagafeed needs to build and test on Debian 12, as root.
# Packages already present are left alone; `apt-get update` runs only when
# something is missing (or always, with --update, as CI does).
set -euo pipefail

PKGS=(build-essential cmake pkg-config clang libclang-rt-14-dev
      libcurl4-openssl-dev libjansson-dev librdkafka-dev libconfig-dev check
      libmicrohttpd-dev libsqlite3-dev libssl-dev nodejs npm openssl kcat
      valgrind gnuplot-nox jq python3-azure-cosmos duktape-dev
      python3 dpkg-dev man-db groff-base prometheus systemd lintian
      chromium chromium-driver python3-selenium)
# python3-azure-cosmos: the second SDK referee (tests/python). duktape-dev:
# cosmolite's stored procedures (emulator/script.cmake builds its source). The packaging
# tests (scripts/package.sh, tests/packaging/): dpkg-dev for dpkg-shlibdeps
# (the .deb's Depends), lintian, man-db and groff-base for man -l, prometheus
# for promtool and the real server, systemd for systemd-analyze. chromium,
# chromium-driver and python3-selenium: the console's browser test
# (tests/console/test_console_browser.py, headless).

update=0
[ "${1:-}" = "--update" ] && update=1

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node and npm may come from outside Debian's packages (the machine image has them).
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<<"${missing[*]:-}"

if [ "$update" = 1 ] || [ "${#missing[@]}" -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
fi
if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing: ${missing[*]}"
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The SDK conformance suite's referee: the official @azure/cosmos from npm.
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -f "$here/tests/conformance/package-lock.json" ]; then
    (cd "$here/tests/conformance" && { [ -d node_modules/@azure/cosmos ] || npm ci --no-audit --no-fund --loglevel=error; })
fi
