#!/usr/bin/env bash
# The main job: installs what is missing, builds, and starts cosmolite on a
# data directory (./cosmolite-data), printing the endpoint, the key and an
# example. Ctrl-C stops it; the data stays for the next start.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target cosmolite >/dev/null
port=${COSMOLITE_PORT:-8081}
key='C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=='
portfile=$(mktemp)
./build/emulator/cosmolite --listen "127.0.0.1:$port" --data cosmolite-data --port-file "$portfile" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$portfile"' EXIT INT TERM
for _ in $(seq 100); do [ -s "$portfile" ] && break; kill -0 $pid 2>/dev/null || exit 1; sleep 0.05; done
cat <<MSG

cosmolite is running (data in $here/cosmolite-data; Ctrl-C stops it).
  endpoint: http://127.0.0.1:$port/
  key:      $key
  example:  node -e "const {CosmosClient}=require('@azure/cosmos');new CosmosClient({endpoint:'http://127.0.0.1:$port/',key:'$key'}).databases.createIfNotExists({id:'demo'}).then(r=>console.log('database',r.database.id))"
            (run it inside tests/conformance, where @azure/cosmos is installed)
MSG
wait $pid
