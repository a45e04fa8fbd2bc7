#!/usr/bin/env bash
# Builds sagafeed with AddressSanitizer + UndefinedBehaviorSanitizer and
# -Werror, then runs the whole test suite through ctest.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
bash scripts/install-deps.sh ${CI:+--update}
build=${SF_BUILD_DIR:-build-test}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DSF_SANITIZE=ON -DSF_WERROR=ON >/dev/null
cmake --build "$build" -j"$(nproc)"
cmake --build "$build" --target format-check
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "$@"
