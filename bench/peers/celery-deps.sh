#!/usr/bin/env bash
# bench/peers/celery-deps.sh: makes sure /usr/bin/python3 can import celery
# and redis (the Celery chord peer, celery_chord.py). When it cannot, it
# installs Debian's python3-celery and python3-redis with apt-get (as root,
# or with sudo without a password); otherwise it prints the command to run
# and exits 1. It installs nothing else and starts no service.
set -euo pipefail

py=${PYTHON:-/usr/bin/python3}
if "$py" -c 'import celery, redis' 2>/dev/null; then
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "celery-deps: $py cannot import celery and redis; install them (Debian: apt-get install python3-celery python3-redis)" >&2
	exit 1
fi
as_root=()
if [ "$EUID" != 0 ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		as_root=(sudo -n)
	else
		echo "celery-deps: $py cannot import celery and redis; run: sudo apt-get update && sudo apt-get install -y python3-celery python3-redis" >&2
		exit 1
	fi
fi
echo "celery-deps: installing python3-celery python3-redis with apt-get" >&2
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-celery python3-redis >&2
"$py" -c 'import celery, redis' || {
	echo "celery-deps: python3-celery and python3-redis are installed but $py still cannot import them" >&2
	exit 1
}
