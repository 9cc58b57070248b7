#!/usr/bin/env bash
# Makes sure the services warren's demo and tests need are there, and says
# exactly what to run when it may not do it itself.
#
#   scripts/services.sh ensure rabbitmq    RabbitMQ answering on 127.0.0.1:5672
#   scripts/services.sh ensure postgres    PostgreSQL on 127.0.0.1:5432, trust
#                                          auth for user postgres, database test
#   scripts/services.sh ensure chromium    Debian's chromium (the dashboard's
#                                          browser test); optional unless CI is set
#   scripts/services.sh ensure promtool    promtool (the alert rules' test); optional
#
# For each service, in order: already answering: nothing to do. Installed
# but stopped: start it (rabbitmq-server -detached or pg_ctlcluster, or
# systemctl when systemd runs) and wait for it. Not installed: install it
# with apt-get when this is Debian or Ubuntu and we are root or sudo -n
# works; otherwise print the exact commands (apt-get, dnf or brew) and exit
# 1. It never stops a service, and never changes the authentication of a
# PostgreSQL it did not install.
#
# Used by `make demo`, `make test` and .ci/run. Settings (all optional):
#   SERVICES_RABBITMQ_PORT  the port probed, default 5672
#   SERVICES_POSTGRES_PORT  the port probed, default 5432
#   SERVICES_WAIT           seconds to wait for a started service, default 120
#   TEST_DATABASE_URL       the database the tests use (default
#                           postgres://postgres@127.0.0.1:5432/test?sslmode=disable)
#   SERVICES_EUID           the user id the script acts as (tests only)
#   SERVICES_SBIN           directories added to PATH, default
#                           /usr/local/sbin:/usr/sbin:/sbin (where Debian puts
#                           rabbitmq-server, outside a user's PATH)
set -euo pipefail

PATH=$PATH${SERVICES_SBIN-:/usr/local/sbin:/usr/sbin:/sbin}

RABBITMQ_PORT=${SERVICES_RABBITMQ_PORT:-5672}
POSTGRES_PORT=${SERVICES_POSTGRES_PORT:-5432}
WAIT=${SERVICES_WAIT:-120}
DATABASE_URL=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:${POSTGRES_PORT}/test?sslmode=disable}
AS_UID=${SERVICES_EUID:-$EUID}

say() { echo "services: $*"; }
warn() { if [ -n "$*" ]; then echo "services: $*" >&2; else echo >&2; fi; }

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_port NAME PORT: wait up to $WAIT seconds for the port.
wait_port() {
	local i
	for ((i = 0; i < WAIT; i++)); do
		port_open "$2" && return 0
		sleep 1
	done
	warn "$1 was started but is not answering on 127.0.0.1:$2 after ${WAIT}s"
	return 1
}

# privileged: this script may run commands as root: it is root, or sudo
# works without a password.
privileged() {
	[ "$AS_UID" = 0 ] || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }
}

# as_root COMMAND...: run a command as root (after privileged said yes).
as_root() {
	if [ "$AS_UID" = 0 ]; then "$@"; else sudo -n "$@"; fi
}

# systemd_runs: systemd is PID 1 (so services are started with systemctl).
systemd_runs() { [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; }

# sudo_prefix: what the printed commands start with.
sudo_prefix() { if [ "$AS_UID" = 0 ]; then echo ""; else echo "sudo "; fi; }

# apt_install PACKAGE...: install Debian packages without starting a
# prompt; returns non-zero when apt-get fails.
APT_UPDATED=
apt_install() {
	say "installing $* with apt-get (Debian/Ubuntu)"
	if [ -z "$APT_UPDATED" ]; then
		as_root apt-get update -qq
		APT_UPDATED=1
	fi
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

# explain_install NAME: print the commands that install and start NAME
# with the package managers found here (all of them when none is), and
# fail.
explain_install() {
	local s apt= dnf= brew=
	s=$(sudo_prefix)
	command -v apt-get >/dev/null 2>&1 && apt=1
	command -v dnf >/dev/null 2>&1 && dnf=1
	command -v brew >/dev/null 2>&1 && brew=1
	if [ -z "$apt$dnf$brew" ]; then apt=1 dnf=1 brew=1; fi
	local name=RabbitMQ
	[ "$1" = postgres ] && name=PostgreSQL
	warn "$name is not installed, and this script may not install it (that needs apt-get, and root or sudo without a password)."
	warn "Install and start it, then run the command again:"
	if [ -n "$apt" ]; then
		warn ""
		warn "  # Debian or Ubuntu"
		case $1 in
		rabbitmq)
			warn "  ${s}apt-get update && ${s}apt-get install -y rabbitmq-server"
			warn "  ${s}rabbitmq-server -detached    # or, where systemd runs: ${s}systemctl start rabbitmq-server"
			;;
		postgres)
			warn "  ${s}apt-get update && ${s}apt-get install -y postgresql"
			warn "  ${s}pg_ctlcluster --skip-systemctl-redirect \$(ls /etc/postgresql) main start"
			explain_postgres_setup
			;;
		esac
	fi
	if [ -n "$dnf" ]; then
		warn ""
		warn "  # Fedora, RHEL"
		case $1 in
		rabbitmq) warn "  ${s}dnf install -y rabbitmq-server && ${s}systemctl enable --now rabbitmq-server" ;;
		postgres)
			warn "  ${s}dnf install -y postgresql-server && ${s}postgresql-setup --initdb && ${s}systemctl enable --now postgresql"
			explain_postgres_setup
			;;
		esac
	fi
	if [ -n "$brew" ]; then
		warn ""
		warn "  # macOS (Homebrew)"
		case $1 in
		rabbitmq) warn "  brew install rabbitmq && brew services start rabbitmq" ;;
		postgres)
			warn "  brew install postgresql@15 && brew services start postgresql@15"
			warn "  createuser -s postgres; createdb -O postgres test    # Homebrew's server trusts local connections"
			;;
		esac
	fi
	return 1
}

# explain_postgres_setup: what the tests need from a PostgreSQL server.
explain_postgres_setup() {
	local s
	s=$(sudo_prefix)
	warn "  # the tests connect as postgres without a password to database test on 127.0.0.1:"
	warn "  ${s}runuser -u postgres -- psql -c 'CREATE DATABASE test'"
	warn "  # and, before the other host lines of pg_hba.conf (then reload):"
	warn "  #   host  test  postgres  127.0.0.1/32  trust"
	warn "  # or point the tests at another database: TEST_DATABASE_URL=postgres://USER:PASS@HOST:PORT/DB?sslmode=disable"
}

# --- RabbitMQ ---------------------------------------------------------------

ensure_rabbitmq() {
	if port_open "$RABBITMQ_PORT"; then
		say "RabbitMQ is answering on 127.0.0.1:$RABBITMQ_PORT"
		return 0
	fi
	if ! command -v rabbitmq-server >/dev/null 2>&1 && ! command -v rabbitmqctl >/dev/null 2>&1; then
		if command -v apt-get >/dev/null 2>&1 && privileged; then
			apt_install rabbitmq-server || {
				warn "apt-get could not install rabbitmq-server"
				return 1
			}
		else
			explain_install rabbitmq
			return 1
		fi
		if port_open "$RABBITMQ_PORT"; then # the package's own start
			await_rabbitmq
			return 0
		fi
	fi
	start_rabbitmq
}

start_rabbitmq() {
	if ! privileged; then
		warn "RabbitMQ is installed but not answering on 127.0.0.1:$RABBITMQ_PORT, and starting it needs root or sudo without a password. Run:"
		if systemd_runs; then
			warn "  sudo systemctl start rabbitmq-server"
		else
			warn "  sudo rabbitmq-server -detached"
		fi
		return 1
	fi
	if systemd_runs; then
		say "starting RabbitMQ: systemctl start rabbitmq-server"
		as_root systemctl start rabbitmq-server || true
	else
		say "starting RabbitMQ: rabbitmq-server -detached"
		as_root rabbitmq-server -detached || true
	fi
	wait_port RabbitMQ "$RABBITMQ_PORT" || return 1
	await_rabbitmq
}

# await_rabbitmq: the port answers before the node has booted its apps;
# await_startup returns once it has.
await_rabbitmq() {
	if command -v rabbitmqctl >/dev/null 2>&1 && privileged; then
		as_root rabbitmqctl -q await_startup >/dev/null 2>&1 || warn "rabbitmqctl await_startup failed; going on"
	fi
	say "RabbitMQ is answering on 127.0.0.1:$RABBITMQ_PORT"
}

# --- PostgreSQL -------------------------------------------------------------

# pg_version: the newest Debian cluster version in /etc/postgresql, or the
# newest server installed under /usr/lib/postgresql.
pg_version() {
	local d v=
	for d in /etc/postgresql/*/main /usr/lib/postgresql/*/bin/postgres; do
		[ -e "$d" ] || continue
		d=${d#/etc/postgresql/}
		d=${d#/usr/lib/postgresql/}
		d=${d%%/*}
		if [ -z "$v" ] || [ "${d%%.*}" -gt "${v%%.*}" ]; then v=$d; fi
	done
	[ -n "$v" ] && echo "$v"
}

ensure_postgres() {
	local installed_here=
	if ! port_open "$POSTGRES_PORT"; then
		if ! command -v pg_ctlcluster >/dev/null 2>&1 && ! command -v pg_ctl >/dev/null 2>&1 && [ -z "$(pg_version || true)" ]; then
			if command -v apt-get >/dev/null 2>&1 && privileged; then
				apt_install postgresql || {
					warn "apt-get could not install postgresql"
					return 1
				}
				installed_here=1
			else
				explain_install postgres
				return 1
			fi
		fi
		port_open "$POSTGRES_PORT" || start_postgres || return 1
	fi
	check_postgres "$installed_here"
}

start_postgres() {
	local v
	v=$(pg_version || true)
	if ! privileged; then
		warn "PostgreSQL is installed but not answering on 127.0.0.1:$POSTGRES_PORT, and starting it needs root or sudo without a password. Run:"
		if systemd_runs; then
			warn "  sudo systemctl start postgresql"
		else
			warn "  sudo pg_ctlcluster --skip-systemctl-redirect ${v:-VERSION} main start"
		fi
		return 1
	fi
	if systemd_runs; then
		say "starting PostgreSQL: systemctl start postgresql"
		as_root systemctl start postgresql || true
	elif command -v pg_ctlcluster >/dev/null 2>&1 && [ -n "$v" ]; then
		if [ ! -d "/etc/postgresql/$v/main" ]; then
			say "creating the PostgreSQL $v cluster main"
			as_root pg_createcluster "$v" main
		fi
		say "starting PostgreSQL: pg_ctlcluster --skip-systemctl-redirect $v main start"
		as_root pg_ctlcluster --skip-systemctl-redirect "$v" main start || true
	else
		warn "PostgreSQL is installed but not answering on 127.0.0.1:$POSTGRES_PORT, and this script knows how to start it only on Debian (pg_ctlcluster) or with systemd; start it, then run the command again"
		return 1
	fi
	wait_port PostgreSQL "$POSTGRES_PORT"
}

# shown_url: the tests' database URL as printed: no password, no query
# (it may hold password=).
shown_url() {
	local u=${DATABASE_URL%%\?*}
	# The password runs to the last @: an unencoded @ in it stays hidden.
	if [[ $u =~ ^([a-z]+://[^:/@]+:).*@([^@]*)$ ]]; then
		u=${BASH_REMATCH[1]}xxxxx@${BASH_REMATCH[2]}
	fi
	echo "$u"
}

# psql_ok: the tests' database answers without a password.
psql_ok() { PGCONNECT_TIMEOUT=10 psql -w -X -q -t -c 'SELECT 1' "$DATABASE_URL" >/dev/null 2>&1; }

# check_postgres INSTALLED_HERE: the tests' database answers; a
# PostgreSQL this script installed just now is set up for them.
check_postgres() {
	if ! command -v psql >/dev/null 2>&1; then
		say "PostgreSQL is answering on 127.0.0.1:$POSTGRES_PORT (no psql here to check database test)"
		return 0
	fi
	if psql_ok; then
		say "PostgreSQL is answering on 127.0.0.1:$POSTGRES_PORT; the tests' database answers"
		return 0
	fi
	if [ -n "$1" ] && [ -z "${TEST_DATABASE_URL:-}" ] && privileged; then
		setup_postgres_for_tests && psql_ok && {
			say "PostgreSQL is set up for the tests: database test, trust for postgres on 127.0.0.1"
			return 0
		}
	fi
	warn "PostgreSQL answers on 127.0.0.1:$POSTGRES_PORT but the tests cannot connect to $(shown_url) without a password."
	explain_postgres_setup
	return 1
}

# setup_postgres_for_tests: only on a server this script installed: the
# database test, and trust for user postgres from 127.0.0.1 to it alone.
# Any local user can then connect to it as the superuser postgres: that is
# what the tests expect, and it is for a development machine only.
setup_postgres_for_tests() {
	local v hba
	v=$(pg_version) || return 1
	hba=/etc/postgresql/$v/main/pg_hba.conf
	[ -f "$hba" ] || return 1
	say "setting up the fresh PostgreSQL for the tests ($hba, database test)"
	as_root runuser -u postgres -- psql -X -q -c 'CREATE DATABASE test' 2>/dev/null || true
	# pg_hba.conf is read top down: the first matching line wins.
	as_root sed -i '1i host  test  postgres  127.0.0.1/32  trust  # added by warren scripts/services.sh for the tests' "$hba"
	as_root runuser -u postgres -- psql -X -q -c 'SELECT pg_reload_conf()' >/dev/null
}

# --- tools for the tests ----------------------------------------------------

# ensure_tool NAME PACKAGE REQUIRED WHY: install a Debian package that
# brings a command; a failure stops only when REQUIRED.
ensure_tool() {
	local name=$1 pkg=$2 required=$3 why=$4
	if command -v "$name" >/dev/null 2>&1; then
		return 0
	fi
	if command -v apt-get >/dev/null 2>&1 && privileged; then
		if apt_install_quiet "$pkg"; then
			return 0
		fi
		warn "could not install $pkg ($why)"
	else
		warn "$name is not installed ($why); install it: $(sudo_prefix)apt-get install $pkg (Debian), or put it on PATH"
	fi
	[ "$required" = 1 ] && return 1
	return 0
}

# apt_install_quiet PACKAGE: install without starting any service the
# package brings (Debian's prometheus would start a server): a
# policy-rc.d that refuses every start, ours only while it installs.
apt_install_quiet() {
	local own_policy= rc=0
	if [ ! -e /usr/sbin/policy-rc.d ] && [ "$AS_UID" = 0 ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && own_policy=1
	fi
	apt_install "$@" >/dev/null 2>&1 || rc=$?
	if [ -n "$own_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
	return "$rc"
}

usage() {
	echo "usage: scripts/services.sh ensure rabbitmq|postgres|chromium|promtool..." >&2
	exit 2
}

[ "${1:-}" = ensure ] && [ $# -ge 2 ] || usage
shift
for svc in "$@"; do
	case $svc in
	rabbitmq) ensure_rabbitmq || exit 1 ;;
	postgres) ensure_postgres || exit 1 ;;
	chromium)
		# Under CI the dashboard's browser test fails without it.
		required=0
		[ -n "${CI:-}" ] && required=1
		ensure_tool chromium chromium "$required" "the dashboard's browser test needs it; without it the test is skipped, or fails under CI" || exit 1
		;;
	promtool) ensure_tool promtool prometheus 0 "it checks the example alert rules; without it only their parse test runs" ;;
	*) usage ;;
	esac
done
