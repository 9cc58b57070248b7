#!/usr/bin/env bash
# cpusplit.sh: how much CPU one task costs the broker and the client, in
# the ceiling run and in the warren run of one `warren bench` round.
#
#   bench/cpusplit.sh [WARREN_BINARY] [warren bench flags...]
#
# It samples the utime+stime of RabbitMQ's beam.smp and of the bench
# process (from /proc) every 100 ms while `warren bench --rounds 1` runs,
# and prints CPU microseconds per task for each phase. Linux only; the
# broker must run on this host. Erlang's schedulers busy-wait, so beam's
# figure is an upper bound on its work.
set -euo pipefail
bin=${1:-warren}
[[ $# -gt 0 ]] && shift
tasks=20000
beam=$(pgrep -f beam.smp | head -1) || { echo "cpusplit: no beam.smp on this host" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
touch "$tmp/bench.log"
stamp() { date +%s.%N | cut -c1-14; }
("$bin" bench --tasks "$tasks" --rounds 1 "$@" 2>&1 | while IFS= read -r l; do echo "$(stamp) $l"; done >"$tmp/bench.log") &
hz=$(getconf CLK_TCK)
while ! grep -q "ratio" "$tmp/bench.log"; do
	p=$(pgrep -f "^$bin bench" | head -1 || true)
	echo "$(stamp) $(awk '{print $14+$15}' /proc/"$beam"/stat) $( [[ -n $p ]] && awk '{print $14+$15}' /proc/"$p"/stat 2>/dev/null)"
	sleep 0.1
done >"$tmp/cpu.log"
wait
python3 - "$tmp" "$tasks" "$hz" <<'PY'
import re, sys
tmp, n, hz = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
log = [l.rstrip("\n").split(" ", 1) for l in open(tmp + "/bench.log")]
def at(pat):
    for ts, line in log:
        if re.search(pat, line):
            return float(ts)
    sys.exit("cpusplit: the bench output lacks " + pat)
rows = [r.split() for r in open(tmp + "/cpu.log")]
rows = [(float(r[0]), int(r[1]), int(r[2])) for r in rows if len(r) == 3]
def per_task(t0, t1, i):
    a = [r for r in rows if t0 <= r[0] <= t1]
    return (a[-1][i] - a[0][i]) / hz / n * 1e6
c0, c1 = at(r"round 1/1: ceiling, "), at(r"round 1/1: ceiling: ")
w0, w1 = at(r"round 1/1: warren: .*echo"), at(r"round 1/1: warren: [0-9]+ tasks/s")
print("ceiling: broker %.0f us/task, client %.0f us/task" % (per_task(c0, c1, 1), per_task(c0, c1, 2)))
print("warren:  broker %.0f us/task, client %.0f us/task" % (per_task(w0, w1, 1), per_task(w0, w1, 2)))
PY
