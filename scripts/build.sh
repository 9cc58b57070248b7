#!/usr/bin/env bash
# Build the warren binary (default ./bin/warren) and show progress while
# it builds: the first build on a machine compiles every package warren
# needs, the standard library included, about 3 to 4 minutes of 2 cores
# (README.md, "The first build"); later builds reuse Go's build cache and
# take seconds. Usage: scripts/build.sh [OUTPUT]   (GO names the go command)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
out=${1:-bin/warren}
total=$("$GO" list -deps ./cmd/warren | wc -l)
echo "building $out: $total packages; the first build compiles them all (minutes: see README.md, \"The first build\"), later ones take seconds" >&2
start=$SECONDS
n=0
step=$(( total / 10 > 0 ? total / 10 : 1 ))
# go build -v names each package as it compiles it; anything else it
# prints (a compile error) is passed on as it is.
"$GO" build -v -o "$out" ./cmd/warren 2>&1 | while IFS= read -r line; do
	case $line in
	*" "* | "#"* | *:*) printf '%s\n' "$line" >&2 ;;
	*)
		n=$((n + 1))
		if [ -t 2 ]; then
			printf '\r  compiled %d of at most %d packages, %ds: %s\033[K' "$n" "$total" $((SECONDS - start)) "$line" >&2
		elif [ $((n % step)) -eq 0 ]; then
			printf '  compiled %d of at most %d packages, %ds\n' "$n" "$total" $((SECONDS - start)) >&2
		fi
		;;
	esac
done
if [ -t 2 ]; then printf '\r\033[K' >&2; fi
echo "built $out in $((SECONDS - start))s" >&2
