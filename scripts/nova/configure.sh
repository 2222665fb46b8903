#!/usr/bin/env bash
# Configures the real-Nova test cloud under $NOVA_E2E_DIR: writes every
# config file (always, so a change in these scripts takes effect), creates
# the MariaDB data directory, and once (marker $NOVA_E2E_DIR/configured)
# creates the databases, syncs their schemas, sets keystone's fernet keys up
# and bootstraps keystone's admin. Leaves MariaDB running for start.sh.
#
# Passwords are random, test-only, kept in $NOVA_E2E_DIR/secrets (mode 600),
# written only into config files there, and never printed nor passed as a
# command-line argument.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
check_host

command -v mariadbd >/dev/null || die "mariadbd missing: run scripts/nova/install.sh"
# root: mariadbd must start as root to switch to the mysql user.
[ "$(id -u)" -eq 0 ] || die "must run as root"
mkdir -p "$ETC"/{keystone,placement,nova,glance,rabbitmq} "$LOGS"/rabbitmq "$RUN" \
	"$NOVA_E2E_DIR"/{keystone/fernet-keys,keystone/credential-keys,nova/state,nova/instances,nova/lock} \
	"$NOVA_E2E_DIR"/{glance/images,glance/staging,glance/cache,glance/lock,rabbitmq/mnesia,mysql/data,mysql/tmp}


DB_PW=$(secret db)
ADMIN_PW=$(secret admin)
SERVICE_PW=$(secret service)
RABBIT_PW=$(secret rabbit)
KS=http://$HOST:$KEYSTONE_PORT
dburl() { echo "mysql+pymysql://nova_e2e:$DB_PW@localhost/$1?unix_socket=$MYSQL_SOCK&charset=utf8"; }

# Every file written here may hold a password: owner-only.
umask 077

# --- MariaDB: unix socket only, no TCP listener at all. -----------------
cat >"$ETC/my.cnf" <<CNF
[client]
socket = $MYSQL_SOCK

[mysqld]
datadir = $NOVA_E2E_DIR/mysql/data
socket = $MYSQL_SOCK
pid-file = $NOVA_E2E_DIR/mysql/mysqld.pid
# Not /tmp: a starting mariadbd deletes every #sql* file in its tmpdir, so a
# second instance sharing /tmp (another NOVA_E2E_DIR, mariadb-install-db)
# pulls the on-disk temporary tables from under this one's running queries
# (seen here: signal 11 in ha_maria::drop_table during a server list).
tmpdir = $NOVA_E2E_DIR/mysql/tmp
skip-networking
skip-name-resolve
character-set-server = utf8mb4
collation-server = utf8mb4_general_ci
max_connections = 400
performance_schema = off
# Test data only: speed over durability.
innodb_buffer_pool_size = 64M
innodb_log_file_size = 32M
innodb_flush_log_at_trx_commit = 0
innodb_doublewrite = 0
sync_binlog = 0
CNF

# --- RabbitMQ: AMQP, distribution and epmd on 127.0.0.1 only. ------------
cat >"$ETC/rabbitmq/rabbitmq.conf" <<CNF
listeners.tcp.1 = 127.0.0.1:$RABBIT_PORT
default_user = nova
default_pass = $RABBIT_PW
loopback_users = none
log.console = true
log.file = false
CNF
echo '[].' >"$ETC/rabbitmq/enabled_plugins"
: >"$ETC/rabbitmq/rabbitmq-env.conf"

authtoken() { # authtoken USER: a [keystone_authtoken]-style password auth block
	cat <<CNF
www_authenticate_uri = $KS/v3
auth_url = $KS/v3
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = service
username = $1
password = $SERVICE_PW
region_name = RegionOne
CNF
}

# --- keystone -------------------------------------------------------------
cat >"$ETC/keystone/keystone.conf" <<CNF
[DEFAULT]
use_stderr = true
[database]
connection = $(dburl keystone)
[token]
provider = fernet
[fernet_tokens]
key_repository = $NOVA_E2E_DIR/keystone/fernet-keys
[fernet_receipts]
key_repository = $NOVA_E2E_DIR/keystone/fernet-keys
[credential]
key_repository = $NOVA_E2E_DIR/keystone/credential-keys
CNF

# --- placement ------------------------------------------------------------
cat >"$ETC/placement/placement.conf" <<CNF
[DEFAULT]
use_stderr = true
[placement_database]
connection = $(dburl placement)
[api]
auth_strategy = keystone
[keystone_authtoken]
$(authtoken placement)
CNF

# --- glance ---------------------------------------------------------------
cat >"$ETC/glance/glance-api.conf" <<CNF
[DEFAULT]
use_stderr = true
bind_host = $HOST
bind_port = $GLANCE_PORT
# 0: serve in this process, no forked workers.
workers = 0
image_cache_dir = $NOVA_E2E_DIR/glance/cache
node_staging_uri = file://$NOVA_E2E_DIR/glance/staging
[database]
connection = $(dburl glance)
[keystone_authtoken]
$(authtoken glance)
[paste_deploy]
flavor = keystone
config_file = $NOVA_E2E_DIR/pkg/usr/share/glance-common/glance-api-paste.ini
[glance_store]
stores = file
default_store = file
filesystem_store_datadir = $NOVA_E2E_DIR/glance/images
[os_glance_staging_store]
filesystem_store_datadir = $NOVA_E2E_DIR/glance/staging
[os_glance_tasks_store]
filesystem_store_datadir = $NOVA_E2E_DIR/glance/staging
[oslo_concurrency]
lock_path = $NOVA_E2E_DIR/glance/lock
CNF

# --- nova: one file for compute (no database access, as Nova wants), the
# same plus the databases for api, conductor, scheduler and nova-manage. ---
cat >"$ETC/nova/nova-compute.conf" <<CNF
[DEFAULT]
use_stderr = true
host = nova-e2e
my_ip = 127.0.0.1
compute_driver = fake.FakeDriver
transport_url = rabbit://nova:$RABBIT_PW@127.0.0.1:$RABBIT_PORT/
state_path = $NOVA_E2E_DIR/nova/state
instances_path = $NOVA_E2E_DIR/nova/instances
enabled_apis = osapi_compute
osapi_compute_listen = $HOST
osapi_compute_listen_port = $NOVA_PORT
osapi_compute_workers = 1
# No Neutron port cache to heal: servers have networks "none".
heal_instance_info_cache_interval = -1
[api]
auth_strategy = keystone
[wsgi]
api_paste_config = $NOVA_E2E_DIR/pkg/usr/share/nova-common/api-paste.ini
[conductor]
workers = 1
[scheduler]
workers = 1
[keystone_authtoken]
$(authtoken nova)
[placement]
$(authtoken placement)
[neutron]
$(authtoken neutron)
[glance]
region_name = RegionOne
[vnc]
enabled = false
[quota]
# Roomy defaults; tests lower instances through the quota-sets API.
instances = 50
cores = 200
ram = 512000
[oslo_concurrency]
lock_path = $NOVA_E2E_DIR/nova/lock
[oslo_messaging_notifications]
driver = noop
CNF
# Two more compute hosts, nova-e2e-2 and nova-e2e-3 (fake driver too): with
# nova-e2e, each is the only host of an availability zone of its own
# (e2e-az1..3: setup_cloud.py zones), so the reaper's placement tests
# spread roles over three zones and see Nova's server groups put servers
# on different hosts. Each has its own state.
for n in 2 3; do
	mkdir -p "$NOVA_E2E_DIR/nova/state-$n" "$NOVA_E2E_DIR/nova/instances-$n"
	sed -e "s|^host = nova-e2e\$|host = nova-e2e-$n|" \
		-e "s|^state_path = .*|state_path = $NOVA_E2E_DIR/nova/state-$n|" \
		-e "s|^instances_path = .*|instances_path = $NOVA_E2E_DIR/nova/instances-$n|" \
		"$ETC/nova/nova-compute.conf" >"$ETC/nova/nova-compute-$n.conf"
done
{
	cat "$ETC/nova/nova-compute.conf"
	cat <<CNF
[api_database]
connection = $(dburl nova_api)
[database]
connection = $(dburl nova)
# No retries when an engine first connects: a cell whose database is down
# (e2e-down) then fails at once and Nova lists its servers as partial
# records, instead of every list waiting out the retries (10 x 10 s).
max_retries = 0
CNF
} >"$ETC/nova/nova.conf"

# --- the database server and, once, the schemas ---------------------------
# mariadbd runs as mysql: it traverses $NOVA_E2E_DIR, owns its data and
# socket directories; the secrets and keys stay root's.
chmod 711 "$NOVA_E2E_DIR"
chmod 700 "$NOVA_E2E_DIR"/keystone/fernet-keys "$NOVA_E2E_DIR"/keystone/credential-keys
chmod 755 "$RUN" "$LOGS"
chown mysql: "$RUN"
chown mysql: "$NOVA_E2E_DIR/mysql" "$NOVA_E2E_DIR/mysql/data" "$NOVA_E2E_DIR/mysql/tmp"
runuser -u mysql -- test -w "$NOVA_E2E_DIR/mysql/data" ||
	die "the mysql user cannot reach $NOVA_E2E_DIR/mysql/data: put NOVA_E2E_DIR where every user can traverse (e.g. under /tmp)"
if [ ! -d "$NOVA_E2E_DIR/mysql/data/mysql" ]; then
	log "mariadb-install-db"
	mariadb-install-db --defaults-file="$ETC/my.cnf" --user=mysql \
		--auth-root-authentication-method=socket --skip-test-db >>"$LOGS/mariadb-install.log" 2>&1 ||
		die "mariadb-install-db failed: see $LOGS/mariadb-install.log"
fi
spawn mariadb mariadbd --defaults-file="$ETC/my.cnf" --user=mysql
wait_up mariadb 60 mysql_cli -e 'select 1'

# down_cell maps a second cell, e2e-down, whose database is a port nothing
# listens on: Nova cannot reach it, as when a cell's database is down. A
# test moves one of its servers' instance mapping there to see how Nova
# (microversion 2.69 or later) lists it: a partial record, status UNKNOWN,
# no name. Its URLs hold no secret (nothing can log in with them); its
# message queue is a vhost nothing uses (the cell has no compute host).
# nova-api reads the cell mappings once, at start: this runs before it.
down_cell() {
	local db="mysql+pymysql://e2e_down@127.0.0.1:$DOWN_CELL_DB_PORT/nova_e2e_down?charset=utf8"
	local mq="rabbit://e2e-down@127.0.0.1:$RABBIT_PORT/e2e-down"
	local uuid
	uuid=$(mysql_cli -N -B -e "select uuid from nova_api.cell_mappings where name='e2e-down'")
	if [ -z "$uuid" ]; then
		log "mapping the unreachable cell e2e-down"
		manage nova-manage nova.cmd.manage "${NOVA_CONF[@]}" cell_v2 create_cell --name e2e-down \
			--transport-url "$mq" --database_connection "$db" ||
			die "create_cell e2e-down failed: see $LOGS/nova-manage.log"
	else
		manage nova-manage nova.cmd.manage "${NOVA_CONF[@]}" cell_v2 update_cell --cell_uuid "$uuid" \
			--transport-url "$mq" --database_connection "$db" ||
			die "update_cell e2e-down failed: see $LOGS/nova-manage.log"
	fi
}
NOVA_CONF=(--config-file "$ETC/nova/nova.conf")

if [ -f "$NOVA_E2E_DIR/configured" ]; then
	down_cell
	log "configured (databases already set up)"
	exit 0
fi

log "creating databases"
{
	echo "CREATE USER IF NOT EXISTS 'nova_e2e'@'localhost' IDENTIFIED BY '$DB_PW';"
	for db in keystone placement nova_api nova nova_cell0 glance; do
		echo "CREATE DATABASE IF NOT EXISTS $db CHARACTER SET utf8mb4;"
		echo "GRANT ALL PRIVILEGES ON $db.* TO 'nova_e2e'@'localhost';"
	done
} | mysql_cli

# The schema syncs are independent of each other: run them side by side.
log "syncing schemas (keystone, placement, nova, glance)"
(
	manage keystone-manage keystone.cmd.manage --config-file "$ETC/keystone/keystone.conf" db_sync
	manage keystone-manage keystone.cmd.manage --config-file "$ETC/keystone/keystone.conf" fernet_setup --keystone-user root --keystone-group root
	manage keystone-manage keystone.cmd.manage --config-file "$ETC/keystone/keystone.conf" credential_setup --keystone-user root --keystone-group root
	# keystone-manage reads the password from the environment.
	OS_BOOTSTRAP_PASSWORD=$ADMIN_PW manage keystone-manage keystone.cmd.manage \
		--config-file "$ETC/keystone/keystone.conf" bootstrap \
		--bootstrap-username admin --bootstrap-project-name admin --bootstrap-role-name admin \
		--bootstrap-service-name keystone --bootstrap-region-id RegionOne \
		--bootstrap-admin-url "$KS/v3" --bootstrap-public-url "$KS/v3" --bootstrap-internal-url "$KS/v3"
) &
ks=$!
(
	manage nova-manage nova.cmd.manage "${NOVA_CONF[@]}" api_db sync
	manage nova-manage nova.cmd.manage "${NOVA_CONF[@]}" cell_v2 map_cell0
	# create_cell is not idempotent: a run interrupted after it must not
	# fail on it the next time.
	if [ "$(mysql_cli -N -B -e "select count(*) from nova_api.cell_mappings where name='cell1'")" -eq 0 ]; then
		manage nova-manage nova.cmd.manage "${NOVA_CONF[@]}" cell_v2 create_cell --name cell1
	fi
	manage nova-manage nova.cmd.manage "${NOVA_CONF[@]}" db sync
) &
nv=$!
(
	OS_PLACEMENT_CONFIG_DIR=$ETC/placement manage placement-manage placement.cmd.manage \
		--config-file "$ETC/placement/placement.conf" db sync
	manage glance-manage glance.cmd.manage --config-file "$ETC/glance/glance-api.conf" db_sync
) &
pg=$!
fail=0
for p in $ks $nv $pg; do wait "$p" || fail=1; done
[ $fail -eq 0 ] || die "schema sync failed (logs in $LOGS)"
down_cell
touch "$NOVA_E2E_DIR/configured"
log "configured"
