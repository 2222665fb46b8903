#!/usr/bin/env bash
# `make swift-up`: configure (first time) and start the real-Swift test
# store under $SWIFT_E2E_DIR: memcached (tempauth keeps its tokens there),
# the account, container and object servers on a one-replica ring, and the
# proxy with tempauth and tempurl in its pipeline, all on 127.0.0.1 (the
# proxy on $SWIFT_E2E_HOST when set: lib.sh). Each
# daemon runs in its own session with its PID in $SWIFT_E2E_DIR/run; stop.sh
# (down.sh) stops them by those PIDs. Idempotent: running daemons are left
# alone.
#
# When the proxy answers it writes $SWIFT_E2E_DIR/env (mode 600, KEY=value):
# SWIFT_E2E_AUTH_URL (tempauth, v1.0), SWIFT_E2E_STORAGE_URL (the account's
# URL), SWIFT_E2E_ACCOUNT, SWIFT_E2E_USER and SWIFT_E2E_KEY (test-only, local).
#
# SWIFT_E2E_PARENT_PID, when set, is a process whose end stops this Swift
# and removes $SWIFT_E2E_DIR (internal/swifttest: a test process's private
# Swift never outlives it, however the process ends).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
check_ports
here=$(cd "$(dirname "$0")" && pwd)

for b in swift-proxy-server swift-account-server swift-container-server swift-object-server swift-ring-builder memcached; do
	command -v "$b" >/dev/null 2>&1 || die "$b is not installed: run scripts/install-test-deps.sh"
done

# A port taken by something not ours would fail later with a less clear error.
for np in proxy:$PROXY_PORT account:$ACCOUNT_PORT container:$CONTAINER_PORT object:$OBJECT_PORT memcached:$MEMCACHE_PORT; do
	addr=127.0.0.1
	[ "${np%%:*}" = proxy ] && addr=$HOST
	if ! running "${np%%:*}" && tcp_up "${np#*:}" "$addr" 2>/dev/null; then
		die "$addr:${np#*:} (for ${np%%:*}) is taken by another process: stop it, or set SWIFT_E2E_PORT_BASE (now $PORT_BASE)"
	fi
done

# Configuration: written when the address or ports differ from the last run's.
ports="$PROXY_PORT $ACCOUNT_PORT $CONTAINER_PORT $OBJECT_PORT $MEMCACHE_PORT $HOST"
if [ "$(cat "$SWIFT_E2E_DIR/configured" 2>/dev/null)" != "$ports" ]; then
	log "configuring under $SWIFT_E2E_DIR (proxy $HOST:$PROXY_PORT)"
	mkdir -p "$ETC" "$SRV/sda1" "$LOGS" "$RUN"
	key=$(secret tester)
	me=$(id -un)
	# swift.conf: the hash path prefix and suffix (random, kept) and one
	# storage policy. Every server reads it from swift_dir, not /etc/swift.
	cat >"$ETC/swift.conf" <<CONF
[swift-hash]
swift_hash_path_suffix = $(secret hash-suffix)
swift_hash_path_prefix = $(secret hash-prefix)

[storage-policy:0]
name = Policy-0
default = yes
CONF
	# [DEFAULT] of every server: loopback, our directory, no privilege
	# drop (we run as $me), no mount check (storage is a plain directory),
	# no forked workers (memory: one process per server).
	common() {
		cat <<CONF
[DEFAULT]
bind_ip = ${3:-127.0.0.1}
bind_port = $1
workers = 0
user = $me
swift_dir = $ETC
devices = $SRV
mount_check = false
log_name = swift-$2
log_level = INFO
CONF
	}
	for s in account container object; do
		port_var=${s^^}_PORT
		{
			common "${!port_var}" "$s"
			cat <<CONF

[pipeline:main]
pipeline = healthcheck recon $s-server

[app:$s-server]
use = egg:swift#$s

[filter:healthcheck]
use = egg:swift#healthcheck

[filter:recon]
use = egg:swift#recon
recon_cache_path = $RUN
CONF
		} >"$ETC/$s-server.conf"
	done
	{
		common "$PROXY_PORT" proxy "$HOST"
		cat <<CONF

[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats tempurl tempauth proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true

[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = $key .admin http://$HOST:$PROXY_PORT/v1/AUTH_test

[filter:tempurl]
use = egg:swift#tempurl
# PUT for the nodes' write-only prefix grants, GET and HEAD for the
# operator's reads; nothing else.
methods = GET HEAD PUT

[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$MEMCACHE_PORT

[filter:catch_errors]
use = egg:swift#catch_errors

[filter:gatekeeper]
use = egg:swift#gatekeeper

[filter:healthcheck]
use = egg:swift#healthcheck

[filter:proxy-logging]
use = egg:swift#proxy_logging

[filter:listing_formats]
use = egg:swift#listing_formats
CONF
	} >"$ETC/proxy-server.conf"
	# One replica, one device, partition power 6: the smallest ring that
	# still spreads objects over partitions.
	# swift-ring-builder's own command line (swift.cli.ringbuilder, what
	# /usr/bin/swift-ring-builder runs), its nine calls in one Python
	# process: each separate call is a Python start, seconds on a loaded
	# machine. Exit 1 is a warning (e.g. a ring of one device), 2 an error.
	rm -f "$ETC"/*.builder "$ETC"/*.ring.gz
	(cd "$ETC" && "$PY" - "$ACCOUNT_PORT" "$CONTAINER_PORT" "$OBJECT_PORT" >"$LOGS/ring.log" 2>&1 <<'PYEOF'
import sys
from swift.cli.ringbuilder import main
for name, port in zip(("account", "container", "object"), sys.argv[1:]):
    for args in (["create", "6", "1", "1"], ["add", "r1z1-127.0.0.1:%s/sda1" % port, "100"], ["rebalance"]):
        try:
            main(["swift-ring-builder", name + ".builder"] + args)
        except SystemExit as e:
            if e.code not in (None, 0, 1):
                sys.exit("swift-ring-builder %s.builder %s: exit %s" % (name, args[0], e.code))
PYEOF
	) || die "swift-ring-builder failed: see $LOGS/ring.log"
	for s in account container object; do
		[ -s "$ETC/$s.ring.gz" ] || die "swift-ring-builder made no $s ring: see $LOGS/ring.log"
	done
	echo "$ports" >"$SWIFT_E2E_DIR/configured"
fi

# The watchdog first: a start that fails half-way is stopped as well
# when the process it watches ends.
if [ -n "${SWIFT_E2E_PARENT_PID:-}" ] && ! running watchdog; then
	[[ $SWIFT_E2E_PARENT_PID =~ ^[0-9]+$ ]] || die "SWIFT_E2E_PARENT_PID=$SWIFT_E2E_PARENT_PID is not a PID"
	spawn watchdog bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2/stop.sh" --purge' \
		watchdog "$SWIFT_E2E_PARENT_PID" "$here"
fi
me=$(id -un)
log "starting memcached, account, container, object, proxy"
spawn memcached memcached -u "$me" -l 127.0.0.1 -p "$MEMCACHE_PORT" -U 0 -m 16 -c 256
# -v: log to stdout (our log file) as well as syslog.
for s in account container object; do
	spawn "$s" "swift-$s-server" "$ETC/$s-server.conf" -v
done
spawn proxy swift-proxy-server "$ETC/proxy-server.conf" -v
wait_up memcached 20 tcp_up "$MEMCACHE_PORT"
healthy() { "$PY" -c 'import sys,urllib.request; urllib.request.urlopen("http://%s:%s/healthcheck" % (sys.argv[2], sys.argv[1]), timeout=2)' "$1" "${2:-127.0.0.1}"; }
wait_up account 60 healthy "$ACCOUNT_PORT"
wait_up container 60 healthy "$CONTAINER_PORT"
wait_up object 60 healthy "$OBJECT_PORT"
wait_up proxy 60 healthy "$PROXY_PORT" "$HOST"


umask 077
cat >"$SWIFT_E2E_DIR/env.tmp" <<ENV
SWIFT_E2E_DIR=$SWIFT_E2E_DIR
SWIFT_E2E_AUTH_URL=http://$HOST:$PROXY_PORT/auth/v1.0
SWIFT_E2E_STORAGE_URL=http://$HOST:$PROXY_PORT/v1/AUTH_test
SWIFT_E2E_ACCOUNT=AUTH_test
SWIFT_E2E_USER=test:tester
SWIFT_E2E_KEY=$(secret tester)
ENV
mv -f "$SWIFT_E2E_DIR/env.tmp" "$SWIFT_E2E_DIR/env"
log "up: env file $SWIFT_E2E_DIR/env"
