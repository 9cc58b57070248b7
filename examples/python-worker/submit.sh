#!/bin/sh
# Submit job.json to the warren server at WARREN_SERVER (default
# http://127.0.0.1:8080), wait for it to close, and print its result.
set -eu
cd "$(dirname "$0")"
SERVER=${WARREN_SERVER:-http://127.0.0.1:8080}
id=$(curl -sf -X POST "$SERVER/v1/jobs" -H 'Content-Type: application/json' --data-binary @job.json |
	sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
echo "job $id"
# The job's server-sent events end with "closed".
curl -sfN "$SERVER/v1/jobs/$id/events" | sed -n '/^event: closed/q;/^data:/p'
curl -sf "$SERVER/v1/jobs/$id"
echo
curl -sf "$SERVER/v1/jobs/$id/result"
echo
