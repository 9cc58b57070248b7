#!/bin/sh
# Run the Python worker's tests: against the RabbitMQ of TEST_AMQP_URL
# (default amqp://guest:guest@127.0.0.1:5672/) and a warren server each
# test class starts itself (built with `go build ./cmd/warren` once per
# run, unless WARREN_BIN names a binary). The tests use Debian's
# python3-pika with /usr/bin/python3; it is installed here when missing.
set -eu
cd "$(dirname "$0")"
PYTHON=${PYTHON:-/usr/bin/python3}
if ! "$PYTHON" -c 'import pika' 2>/dev/null; then
	echo "python/test.sh: pika is missing for $PYTHON; installing python3-pika with apt-get" >&2
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "python/test.sh: no apt-get here: install pika 1.2 or newer for $PYTHON (python3-pika, or pip install 'pika>=1.2,<2')" >&2
		exit 1
	fi
	SUDO=
	if [ "$(id -u)" -ne 0 ]; then
		SUDO="sudo -n" # never a password prompt in the middle of make test
	fi
	if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq python3-pika; }; then
		echo "python/test.sh: apt-get could not install python3-pika; install it and run again" >&2
		exit 1
	fi
	if ! "$PYTHON" -c 'import pika' 2>/dev/null; then
		echo "python/test.sh: python3-pika is installed but $PYTHON cannot import pika" >&2
		exit 1
	fi
fi
exec "$PYTHON" -m unittest discover -s tests -t . "$@"
