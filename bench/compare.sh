#!/usr/bin/env bash
# bench/compare.sh: the side-by-side table of docs/performance.md, from one
# run on this machine: warren bench (SQLite and PostgreSQL; batch size
# chosen by warren, 1 and 32), bench/peers (River with its defaults and
# tuned, asynq), and the slow-task case (tasks of 20 ms, batch size chosen
# by warren against batch_size 1, interleaved). Every throughput is also
# given as a multiple of the broker's one-message-per-task ceiling, the
# median of the ceilings the warren runs measured. Then the many small jobs
# (issue 26): C clients each submit a job of T no-op tasks and wait for it,
# J jobs in all, on warren (bench --small-jobs, SQLite and PostgreSQL),
# Celery chords (bench/peers/celery_chord.py) and River with a fan-in
# callback (peers river-small, defaults and tuned).
#
#   bench/compare.sh [--tasks N] [--rounds R] [--small-only]
#
# --small-only runs the many-small-jobs section alone. Needs the local
# RabbitMQ, PostgreSQL (WARREN_BENCH_PG, default
# postgres://root@127.0.0.1:5432/test, for warren and River; a schema of
# its own is created and dropped) and Redis (for asynq and Celery's
# results, 127.0.0.1:6379); Celery's Debian packages are installed with
# apt-get when missing (bench/peers/celery-deps.sh). Prints the tables on
# stdout, progress on stderr, and keeps every run's JSON in $OUT (default a
# temporary directory, named at the end).
set -euo pipefail

tasks=20000
rounds=3
big=1
# The many-small-jobs shape, the defaults of warren bench --small-jobs,
# given to every system explicitly.
small_clients=8 small_jobs=400 small_tasks=10 small_workers=2 small_concurrency=16
while [ $# -gt 0 ]; do
	case "$1" in
	--tasks) tasks="$2"; shift 2 ;;
	--rounds) rounds="$2"; shift 2 ;;
	--small-only) big=; shift ;;
	-h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

# big_section: the one-big-job section (the first table).
big_section() {
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
}

# small NAME COMMAND...: one many-small-jobs run, its JSON in $out/NAME.json.
small() {
	local name=$1
	shift
	echo "$* ($name)" >&2
	"$@" >"$out/$name.json" 2>"$out/$name.log"
}

# small_section: the many-small-jobs section: the same C, J, T, W and N on
# every system; each run also has a one-client pass (alone_p50_ms).
small_section() {
	local shape=(--clients "$small_clients" --jobs "$small_jobs" --job-tasks "$small_tasks"
		--workers "$small_workers" --concurrency "$small_concurrency")
	local runs=() have_warren=
	# warren bench --small-jobs is newer than the rest of compare.sh: a
	# warren without it gets a line in the output, not a failed run.
	local help
	help=$("$out/warren" bench -h 2>&1 || true)
	if [[ $help == *-small-jobs* ]]; then
		have_warren=1
		small small-sqlite "$out/warren" bench --small-jobs "${shape[@]}" --rounds "$rounds" --json
		fresh_schema
		small small-pg "$out/warren" bench --small-jobs "${shape[@]}" --rounds "$rounds" --json --database "$pgschema"
		runs+=(small-sqlite:"warren:SQLite" small-pg:"warren:PostgreSQL")
	fi
	bash "$root/bench/peers/celery-deps.sh"
	small small-celery /usr/bin/python3 "$root/bench/peers/celery_chord.py" "${shape[@]}" --json
	small small-river-defaults "$out/peers" river-small "${shape[@]}" --database "$pg" --json
	small small-river-tuned "$out/peers" river-small "${shape[@]}" --database "$pg" --tuned --json
	runs+=(small-celery:"Celery:chords, threads pool, RabbitMQ broker, Redis results"
		small-river-defaults:"River:PostgreSQL, fan-in callback, defaults"
		small-river-tuned:"River:PostgreSQL, fan-in callback, tuned")

	echo
	echo "many small jobs: $small_clients clients, $small_jobs jobs of $small_tasks no-op tasks, $small_workers workers x $small_concurrency, submit to close:"
	echo
	echo "| system | configuration | jobs/s | tasks/s | p50 | p99 |"
	echo "| --- | --- | --- | --- | --- | --- |"
	local run f label
	for run in "${runs[@]}"; do
		f="$out/${run%%:*}.json"
		label=${run#*:}
		jq -r --arg sys "${label%%:*}" --arg cfg "${label#*:}" \
			'"| \($sys) | \($cfg) | \(.jobs_per_s|round) | \(.tasks_per_s|round) | \(.p50_ms*10|round/10) ms | \(.p99_ms*10|round/10) ms |"' "$f"
	done
	echo
	if [ -n "$have_warren" ]; then
		for run in small-sqlite:SQLite small-pg:PostgreSQL; do
			jq -r --arg n "${run#*:}" '"warren, \($n): tasks/s \(.tasks_per_s|round) = \(.ratio) of the same run'"'"'s one 20,000-task job (\(.big_tasks_per_s|round) tasks/s)"' "$out/${run%%:*}.json"
		done
	else
		echo "warren: not run (this warren bench has no --small-jobs)"
	fi
	echo "one client alone, p50 / p99:"
	for run in "${runs[@]}"; do
		label=${run#*:}
		jq -r --arg l "${label%%:*}, ${label#*:}" '"  \($l): \(.alone_p50_ms) / \(.alone_p99_ms) ms"' "$out/${run%%:*}.json"
	done
}

if [ -n "$big" ]; then
	big_section
fi
small_section
echo "runs kept in $out" >&2
