#!/usr/bin/env bash
# bench/compare.sh: the side-by-side table of docs/performance.md, from one
# run on this machine: warren bench (SQLite and PostgreSQL; batch size
# chosen by warren, 1 and 32), bench/peers (River with its defaults and
# tuned, asynq), and the slow-task case (tasks of 20 ms, batch size chosen
# by warren against batch_size 1, interleaved). Every throughput is also
# given as a multiple of the broker's one-message-per-task ceiling, the
# median of the ceilings the warren runs measured.
#
#   bench/compare.sh [--tasks N] [--rounds R]
#
# Needs the local RabbitMQ, PostgreSQL (WARREN_BENCH_PG, default
# postgres://root@127.0.0.1:5432/test, for warren and River; a schema of
# its own is created and dropped) and Redis (for asynq, 127.0.0.1:6379).
# Prints the table on stdout, progress on stderr, and keeps every run's
# JSON in $OUT (default a temporary directory, named at the end).
set -euo pipefail

tasks=20000
rounds=3
while [ $# -gt 0 ]; do
	case "$1" in
	--tasks) tasks="$2"; shift 2 ;;
	--rounds) rounds="$2"; shift 2 ;;
	-h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench/compare.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
for tool in jq psql; do
	command -v "$tool" >/dev/null || { echo "bench/compare.sh: needs $tool" >&2; exit 2; }
done

root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$(mktemp -d)}
pg=${WARREN_BENCH_PG:-postgres://root@127.0.0.1:5432/test}
schema="warren_compare_$$"
psql -q "$pg" -c "CREATE SCHEMA $schema" >/dev/null
trap 'psql -q "$pg" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true' EXIT
sep='?'
case "$pg" in *\?*) sep='&' ;; esac
pgschema="${pg}${sep}search_path=$schema"

echo "building warren and bench/peers" >&2
(cd "$root" && go build -o "$out/warren" ./cmd/warren)
# GOWORK=off: bench/peers is not in go.work (its River and asynq would
# raise the versions warren's own tests build with).
(cd "$root/bench/peers" && GOWORK=off go build -o "$out/peers" .)

# warren NAME ARGS...: one warren bench run, its JSON in $out/NAME.json.
warren() {
	local name=$1
	shift
	echo "warren bench $* ($name)" >&2
	"$out/warren" bench --tasks "$tasks" --rounds "$rounds" --json "$@" >"$out/$name.json" 2>"$out/$name.log"
}
# fresh_schema: empties the PostgreSQL schema between warren runs.
fresh_schema() {
	psql -q "$pg" -c "DROP SCHEMA $schema CASCADE; CREATE SCHEMA $schema" >/dev/null
}

warren sqlite-auto
warren sqlite-1 --batch-size 1
warren sqlite-32 --batch-size 32
fresh_schema
warren pg-auto --database "$pgschema"
fresh_schema
warren pg-1 --database "$pgschema" --batch-size 1
fresh_schema
warren pg-32 --database "$pgschema" --batch-size 32

for cfg in defaults tuned; do
	echo "peers river ($cfg)" >&2
	flag=()
	[ "$cfg" = tuned ] && flag=(--tuned)
	"$out/peers" river --tasks "$tasks" --database "$pg" --json "${flag[@]}" >"$out/river-$cfg.json" 2>"$out/river-$cfg.log"
done
echo "peers asynq" >&2
"$out/peers" asynq --tasks "$tasks" --json >"$out/asynq.json" 2>"$out/asynq.log"

# The slow-task case: 3,200 tasks of 20 ms over 2 workers x 16, one round
# each, interleaved twice.
for i in 1 2; do
	for b in 1 0; do
		echo "warren bench slow tasks, batch size $b, pass $i" >&2
		"$out/warren" bench --tasks 3200 --workers 2 --concurrency 16 --task-duration 20ms --rounds 1 \
			--batch-size "$b" --json >"$out/slow-$b-$i.json" 2>"$out/slow-$b-$i.log"
	done
done

ceiling=$(jq -s '[.[].ceiling_tasks_per_s] | sort | .[length/2|floor]' "$out"/sqlite-*.json "$out"/pg-*.json)
row() { # system, configuration, tasks/s
	printf '| %s | %s | %s | %.2f |\n' "$1" "$2" "$(printf '%.0f' "$3")" "$(jq -n "$3 / $ceiling")"
}
echo "| system | configuration | tasks/s | x ceiling |"
echo "| --- | --- | --- | --- |"
for run in sqlite-auto:"SQLite, no batch_size (warren chooses)" sqlite-1:"SQLite, batch_size 1" sqlite-32:"SQLite, batch_size 32" \
	pg-auto:"PostgreSQL, no batch_size (warren chooses)" pg-1:"PostgreSQL, batch_size 1" pg-32:"PostgreSQL, batch_size 32"; do
	row warren "${run#*:}" "$(jq .warren_tasks_per_s "$out/${run%%:*}.json")"
done
row River "PostgreSQL, defaults" "$(jq .tasks_per_s "$out/river-defaults.json")"
row River "PostgreSQL, tuned" "$(jq .tasks_per_s "$out/river-tuned.json")"
row asynq "Redis, defaults" "$(jq .tasks_per_s "$out/asynq.json")"
echo
echo "broker ceiling (one message per task, median of the warren runs' ceilings): $(printf '%.0f' "$ceiling") tasks/s"
echo "per warren run: ratio to its own ceiling, CPU per task, one-task job p50:"
for f in "$out"/sqlite-*.json "$out"/pg-*.json; do
	jq -r --arg n "$(basename "$f" .json)" '"  \($n): \(.ratio) of \(.ceiling_tasks_per_s|floor) tasks/s, \(.warren_cpu_us_per_task) µs/task, one-task p50 \(.one_task_p50_ms) ms, rounds \(.rounds_warren_tasks_per_s)"' "$f"
done
echo "slow tasks (3,200 x 20 ms, 2 workers x 16), submit to closed:"
for i in 1 2; do
	echo "  pass $i: batch_size 1 $(jq .total_s "$out/slow-1-$i.json") s, warren chooses $(jq .total_s "$out/slow-0-$i.json") s"
done
echo "runs kept in $out" >&2
