#!/usr/bin/env bash
# Times the README's Getting started from a fresh clone of this checkout,
# with an empty Go build cache (the module cache is kept): make demo,
# the build, the server, the Python worker, the two jobs of step 4 and
# the dashboard, printing the time after each. Needs what Getting started
# needs (Go, RabbitMQ installed, /usr/bin/python3 with pika) and port
# 8080 free. Everything it made is removed at the end.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
t0=$(date +%s.%N)
stamp() { printf '%7.1f s: %s\n' "$(echo "$(date +%s.%N) - $t0" | bc)" "$*"; }
d=$(mktemp -d)
export GOCACHE=$d/gocache WARREN_PREFIX="gs-$$."
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	(cd "$d/warren" 2>/dev/null && ./warren topology delete --prefix "$WARREN_PREFIX" >/dev/null 2>&1) || true
	rm -rf "$d"
}
trap cleanup EXIT
git clone -q "$src" "$d/warren" && cd "$d/warren"
stamp "cloned"
make demo >"$d/demo.log" 2>&1 || { tail -20 "$d/demo.log"; exit 1; }
stamp "make demo: $(tail -1 "$d/demo.log" | cut -c1-60)"
go build -o warren ./cmd/warren
stamp "go build -o warren ./cmd/warren"
./warren server >"$d/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do curl -sf http://127.0.0.1:8080/healthz >/dev/null && break; sleep 0.1; done
stamp "the server answers"
PYTHONPATH=python /usr/bin/python3 examples/python-worker/worker.py >"$d/worker.log" 2>&1 &
pids+=($!)
id=$(echo '{"type": "wordcount", "reduce": "merge", "tasks": [{"text": "the cat"}, {"text": "the hat"}]}' | ./warren submit -)
./warren watch "$id" >/dev/null
stamp "the first job's result: $(./warren result "$id" | tr -d ' \n')"
id=$(echo '{"type": "wordcount", "reduce": {"task": "top_words", "payload": {"n": 2}}, "tasks": [{"text": "the cat"}, {"text": "the hat"}]}' | ./warren submit -)
./warren watch "$id" >/dev/null
stamp "the reduce task's result: $(./warren result "$id" | tr -d ' \n')"
stamp "the dashboard: HTTP $(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/ui/)"
