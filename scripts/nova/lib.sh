# Shared settings for the scripts/nova/* scripts: sourced, never run.
#
# Everything the test cloud writes lives under $NOVA_E2E_DIR (default
# /tmp/orchestrate-nova): configuration, databases, logs, PID files, the env
# file and clouds.yaml. Only the apt packages live elsewhere.

NOVA_E2E_DIR=${NOVA_E2E_DIR:-/tmp/orchestrate-nova}
export NOVA_E2E_DIR

# Debian's python3, not whatever python3 comes first on PATH: only it sees
# the python3-nova & co. packages.
PY=/usr/bin/python3

# running, spawn, wait_up, stop_daemons, daemon_status, secret.
. "$(dirname "${BASH_SOURCE[0]}")/../lib/daemons.sh"

# The API services (keystone, placement, glance, nova-api, the Neutron
# stand-in) listen on $NOVA_E2E_HOST (default 127.0.0.1), which is also the
# host of every URL in keystone's catalog, the env file and clouds.yaml: the
# lab gives its bridge address (198.18.0.1) so its containers reach them.
# RabbitMQ, epmd and MariaDB stay on loopback whatever it is.
HOST=${NOVA_E2E_HOST:-127.0.0.1}

# check_host: configure.sh and start.sh, which write and bind $HOST, refuse
# anything but a dotted IPv4 address (exit 2); stop.sh and status.sh need
# no host, so a wrong one never keeps a cloud from being stopped.
check_host() {
	local octet='(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])'
	if ! [[ $HOST =~ ^$octet(\.$octet){3}$ ]]; then
		printf '%s nova-e2e: error: NOVA_E2E_HOST=%q: want an IPv4 address of this host, e.g. 127.0.0.1\n' "$(date -u +%H:%M:%S)" "$HOST" >&2
		exit 2
	fi
}

# The ports sit below Linux's ephemeral range (32768-60999) so that tests
# asking the kernel for a free port (Consul dev agents) never collide with
# them. NOVA_E2E_PORT_BASE moves them all.
PORT_BASE=${NOVA_E2E_PORT_BASE:-24700}
KEYSTONE_PORT=$((PORT_BASE + 0))
PLACEMENT_PORT=$((PORT_BASE + 1))
GLANCE_PORT=$((PORT_BASE + 2))
NOVA_PORT=$((PORT_BASE + 3))
NEUTRON_PORT=$((PORT_BASE + 4))
RABBIT_PORT=$((PORT_BASE + 5))
RABBIT_DIST_PORT=$((PORT_BASE + 6))
EPMD_PORT=$((PORT_BASE + 7))
# Nothing listens here: the database of the unreachable cell e2e-down.
DOWN_CELL_DB_PORT=$((PORT_BASE + 9))

ETC=$NOVA_E2E_DIR/etc
LOGS=$NOVA_E2E_DIR/log
RUN=$NOVA_E2E_DIR/run
MYSQL_SOCK=$RUN/mysqld.sock
SECRETS=$NOVA_E2E_DIR/secrets

log() { printf '%s nova-e2e: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The rabbitmq environment: its state, config and cookie under our dir, and
# epmd plus the distribution port on loopback only.
rabbit_env() {
	export HOME=$NOVA_E2E_DIR/rabbitmq
	export RABBITMQ_NODENAME=nova-e2e@localhost
	export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 NODE_IP_ADDRESS=127.0.0.1
	export RABBITMQ_NODE_PORT=$RABBIT_PORT
	export RABBITMQ_DIST_PORT=$RABBIT_DIST_PORT
	# Without this the Erlang distribution port listens on every interface.
	export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1}'
	export ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT=$EPMD_PORT
	export RABBITMQ_CONFIG_FILE=$ETC/rabbitmq/rabbitmq.conf
	export RABBITMQ_ENABLED_PLUGINS_FILE=$ETC/rabbitmq/enabled_plugins
	export RABBITMQ_MNESIA_BASE=$NOVA_E2E_DIR/rabbitmq/mnesia
	export RABBITMQ_LOG_BASE=$LOGS/rabbitmq
	export RABBITMQ_PID_FILE=$RUN/rabbitmq.erlpid
	export RABBITMQ_CONF_ENV_FILE=$ETC/rabbitmq/rabbitmq-env.conf
}



# pycode PROG MODULE: Python code running an OpenStack console-script entry
# point, for `"$PY" -c "$(pycode PROG MODULE)" ARGS...`: the service packages
# that ship the /usr/bin wrappers are not installed, only the libraries.
pycode() {
	printf 'import sys; sys.argv[0] = "%s"; from %s import main; sys.exit(main())' "$1" "$2"
}

# manage PROG MODULE ARGS...: run a *-manage command once, output to its log.
manage() {
	local prog=$1 mod=$2
	shift 2
	mkdir -p "$LOGS"
	"$PY" -c "$(pycode "$prog" "$mod")" "$@" >>"$LOGS/$prog.log" 2>&1 ||
		die "$prog $* failed: see $LOGS/$prog.log"
}

# wait_for WHAT SECONDS CMD...: retry CMD every 0.3 s until it succeeds.
wait_for() {
	local what=$1 secs=$2
	local deadline=$((SECONDS + secs))
	shift 2
	until "$@" >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$deadline" ] || die "timed out after ${secs}s waiting for $what (logs in $LOGS)"
		sleep 0.3
	done
}


# http_up URL: whether something answers HTTP at URL (any status).
http_up() {
	"$PY" - "$1" <<'PYEOF'
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1], timeout=2)
except urllib.error.HTTPError:
    pass
PYEOF
}

mysql_cli() { mariadb --defaults-file="$ETC/my.cnf" "$@"; }
