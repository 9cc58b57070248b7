#!/bin/sh
# dlx-worker-restart.sh [NODE] [INTERVAL]: every INTERVAL seconds (30),
# restarts the quorum-queue dead-letter workers of NODE (this host's node
# when not given) that hold a dead letter unconfirmed for 30 s or more
# (dlx-worker-restart.erl, next to this script). For RabbitMQ 3.10 and 3.11
# clusters; run one on every node, as a service. docs/operations.md
# ("RabbitMQ cluster") says why.
set -eu
dir=$(dirname "$0")
node=${1:-}
interval=${2:-30}
expr=$(cat "$dir/dlx-worker-restart.erl")
while :; do
	if [ -n "$node" ]; then
		out=$(rabbitmqctl -q -n "$node" eval "$expr" 2>&1) || true
	else
		out=$(rabbitmqctl -q eval "$expr" 2>&1) || true
	fi
	case $out in
	"[]" | "") ;;
	*) echo "$(date -u +%FT%TZ) dlx-worker-restart: $out" ;;
	esac
	sleep "$interval"
done
