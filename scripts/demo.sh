#!/usr/bin/env bash
# The main job: installs what is missing, builds sagafeed and cosmolite, and
# runs the order fulfilment demo on a private cosmolite: seeds products,
# customers and ORDERS orders (some fail on stock or balance), runs the saga
# processor until every order settles, and prints what happened with a
# conservation check. Exits non-zero when anything does not add up.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target sagafeed cosmolite >/dev/null
exec ./build/cli/sagafeed demo --orders "${ORDERS:-200}" "$@"
