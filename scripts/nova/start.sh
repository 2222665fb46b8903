#!/usr/bin/env bash
# Starts the real-Nova test cloud configured by configure.sh: MariaDB (unix
# socket only), epmd + RabbitMQ (127.0.0.1), and on $NOVA_E2E_HOST (default
# 127.0.0.1) the Neutron stand-in, keystone, placement, glance-api and
# nova-api; nova-conductor, nova-scheduler and nova-compute (fake virt
# driver) listen nowhere. Each daemon runs in its own
# session with its PID in $NOVA_E2E_DIR/run/<name>.pid; stop.sh stops them by
# those PIDs. Already-running daemons are left alone, so it is idempotent.
#
# When the cloud answers it writes $NOVA_E2E_DIR/env (OS_* variables and the
# flavor and image to boot; KEY=value lines) and $NOVA_E2E_DIR/clouds.yaml
# (cloud "nova-e2e"), both mode 600: the passwords are test-only and local.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
check_host
here=$(cd "$(dirname "$0")" && pwd)

[ -f "$NOVA_E2E_DIR/configured" ] || die "not configured: run scripts/nova/configure.sh"
FLAVOR=${NOVA_E2E_FLAVOR:-e2e.tiny}
NOHOST_FLAVOR=${NOVA_E2E_FLAVOR_NOHOST:-e2e.nohost}
IMAGE=${NOVA_E2E_IMAGE:-e2e-tiny}
KS=http://$HOST:$KEYSTONE_PORT
export NOVA_E2E_KEYSTONE=$KS NOVA_E2E_FLAVOR=$FLAVOR NOVA_E2E_IMAGE=$IMAGE NOVA_E2E_FLAVOR_NOHOST=$NOHOST_FLAVOR
export NOVA_E2E_ADMIN_PW NOVA_E2E_SERVICE_PW
NOVA_E2E_ADMIN_PW=$(secret admin)
NOVA_E2E_SERVICE_PW=$(secret service)
export NOVA_E2E_COMPUTE_URL=http://$HOST:$NOVA_PORT/v2.1
export NOVA_E2E_PLACEMENT_URL=http://$HOST:$PLACEMENT_PORT
export NOVA_E2E_IMAGE_URL=http://$HOST:$GLANCE_PORT
export NOVA_E2E_NETWORK_URL=http://$HOST:$NEUTRON_PORT

# tcp_up [ADDR:]PORT: whether something accepts TCP there (127.0.0.1 when
# no address is given).
tcp_up() {
	local a=${1%:*} p=${1##*:}
	[ "$a" = "$1" ] && a=127.0.0.1
	"$PY" -c 'import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 1).close()' "$a" "$p"
}
sql_count() { [ "$(mysql_cli -N -B -e "$1")" -gt 0 ]; }

# The API services bind $HOST: it must be this host's (the lab's bridge
# address exists only once the lab's network is up).
"$PY" -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1], 0)); s.close()' "$HOST" 2>/dev/null ||
	die "NOVA_E2E_HOST=$HOST is no address of this host (for the lab: bring its network up first)"
# A port taken by something that is not ours (another checkout's cloud, a
# leftover daemon) would fail much later with a less clear error.
for np in epmd:127.0.0.1:$EPMD_PORT rabbitmq:127.0.0.1:$RABBIT_PORT rabbitmq:127.0.0.1:$RABBIT_DIST_PORT \
	neutron:$HOST:$NEUTRON_PORT keystone:$HOST:$KEYSTONE_PORT placement:$HOST:$PLACEMENT_PORT \
	glance-api:$HOST:$GLANCE_PORT nova-api:$HOST:$NOVA_PORT; do
	if ! running "${np%%:*}" && tcp_up "${np#*:}" 2>/dev/null; then
		die "${np#*:} (for ${np%%:*}) is taken by another process: stop it, or set NOVA_E2E_PORT_BASE (now $PORT_BASE)"
	fi
done

log "starting mariadb, rabbitmq, neutron stand-in, keystone, placement"
spawn mariadb mariadbd --defaults-file="$ETC/my.cnf" --user=mysql
(
	rabbit_env
	# Our own epmd, on loopback and our port, so stop.sh can stop it too
	# (rabbitmq would otherwise start one that outlives it).
	spawn epmd epmd -address 127.0.0.1 -port "$EPMD_PORT"
	wait_up epmd 20 tcp_up "$EPMD_PORT"
	spawn rabbitmq /usr/lib/rabbitmq/bin/rabbitmq-server
)
spawn neutron "$PY" "$here/neutron_stub.py" "$NEUTRON_PORT" "$HOST"
wait_up mariadb 60 mysql_cli -e 'select 1'
spawn keystone env OS_KEYSTONE_CONFIG_DIR="$ETC/keystone" \
	"$PY" "$here/wsgi_serve.py" keystone.server.wsgi:initialize_public_application "$KEYSTONE_PORT" "$HOST"
spawn placement env OS_PLACEMENT_CONFIG_DIR="$ETC/placement" \
	"$PY" "$here/wsgi_serve.py" placement.wsgi:init_application "$PLACEMENT_PORT" "$HOST"
wait_up keystone 90 http_up "$KS/v3"
# identity-done holds the keystone URL the catalog was made for: started
# on another NOVA_E2E_HOST or port base, the catalog is made again.
if [ "$(cat "$NOVA_E2E_DIR/identity-done" 2>/dev/null)" != "$KS" ]; then
	log "creating service users and the catalog ($KS)"
	"$PY" "$here/setup_cloud.py" identity >>"$LOGS/setup.log" 2>&1 || die "identity setup failed: see $LOGS/setup.log"
	echo "$KS" >"$NOVA_E2E_DIR/identity-done"
fi

log "starting glance-api, nova-conductor, nova-scheduler, nova-api"
NOVA_CONF=(--config-file "$ETC/nova/nova.conf")
spawn glance-api "$PY" -c "$(pycode glance-api glance.cmd.api)" --config-file "$ETC/glance/glance-api.conf"
wait_up rabbitmq 90 tcp_up "$RABBIT_PORT"
spawn nova-conductor "$PY" -c "$(pycode nova-conductor nova.cmd.conductor)" "${NOVA_CONF[@]}"
spawn nova-scheduler "$PY" -c "$(pycode nova-scheduler nova.cmd.scheduler)" "${NOVA_CONF[@]}"
spawn nova-api "$PY" -c "$(pycode nova-api nova.cmd.api)" "${NOVA_CONF[@]}"
# The compute hosts: nova-e2e, nova-e2e-2 and nova-e2e-3 (zones e2e-az1,
# e2e-az2 and e2e-az3: setup_cloud.py zones), each a nova-compute of its
# own on the fake driver (daemon NAME, host HOST).
COMPUTES=("nova-compute:nova-e2e" "nova-compute-2:nova-e2e-2" "nova-compute-3:nova-e2e-3")
# nova-compute asks the conductor for its service record at start; started
# before the conductor listens it stalls for the RPC timeout.
for nh in "${COMPUTES[@]}"; do
	if ! running "${nh%%:*}"; then
		wait_up nova-conductor 120 grep -q 'Starting conductor node' "$LOGS/nova-conductor.log"
		break
	fi
done
since=$(mysql_cli -N -B -e 'select utc_timestamp()')
started=()
for nh in "${COMPUTES[@]}"; do
	name=${nh%%:*}
	if ! running "$name"; then
		log "starting $name"
		spawn "$name" "$PY" -c "$(pycode nova-compute nova.cmd.compute)" --config-file "$ETC/nova/$name.conf"
		started+=("$nh")
	fi
done
for nh in ${started[@]+"${started[@]}"}; do
	# Ready once this run of it has reported its service state (an
	# earlier run's records do not count).
	wait_up "${nh%%:*}" 120 sql_count "select count(*) from nova.services
		where host='${nh#*:}' and topic='compute' and deleted=0 and updated_at >= '$since'"
done
for nh in "${COMPUTES[@]}"; do
	wait_up "${nh%%:*}" 120 sql_count "select count(*) from nova.compute_nodes where host='${nh#*:}' and deleted=0"
done
for nh in "${COMPUTES[@]}"; do
	host=${nh#*:}
	if ! sql_count "select count(*) from nova_api.host_mappings where host='$host'"; then
		# cell1 only: discovering in the unreachable cell e2e-down would fail.
		cell1=$(mysql_cli -N -B -e "select uuid from nova_api.cell_mappings where name='cell1'")
		manage nova-manage nova.cmd.manage "${NOVA_CONF[@]}" cell_v2 discover_hosts --cell_uuid "$cell1"
		sql_count "select count(*) from nova_api.host_mappings where host='$host'" || die "nova-manage cell_v2 discover_hosts did not map host $host"
	fi
done
# Each compute host's resource provider has its inventory in placement.
rp_count() { [ "$(mysql_cli -N -B -e 'select count(distinct resource_provider_id) from placement.inventories')" -ge ${#COMPUTES[@]} ]; }
wait_up placement 60 rp_count
wait_up nova-api 60 http_up "http://$HOST:$NOVA_PORT/"
wait_up glance-api 60 http_up "http://$HOST:$GLANCE_PORT/"

log "creating flavors $FLAVOR, $NOHOST_FLAVOR and image $IMAGE"
"$PY" "$here/setup_cloud.py" resources >>"$LOGS/setup.log" 2>&1 || die "flavor/image setup failed: see $LOGS/setup.log"
log "availability zones: nova-e2e in e2e-az1, nova-e2e-2 in e2e-az2, nova-e2e-3 in e2e-az3 (host aggregates)"
"$PY" "$here/setup_cloud.py" zones >>"$LOGS/setup.log" 2>&1 || die "zone setup failed: see $LOGS/setup.log"

umask 077
cat >"$NOVA_E2E_DIR/env.tmp" <<ENV
OS_AUTH_URL=$KS/v3
OS_USERNAME=admin
OS_PASSWORD=$NOVA_E2E_ADMIN_PW
OS_PROJECT_NAME=admin
OS_USER_DOMAIN_NAME=Default
OS_PROJECT_DOMAIN_NAME=Default
OS_REGION_NAME=RegionOne
OS_INTERFACE=public
OS_IDENTITY_API_VERSION=3
NOVA_E2E_DIR=$NOVA_E2E_DIR
NOVA_E2E_FLAVOR=$FLAVOR
NOVA_E2E_FLAVOR_NOHOST=$NOHOST_FLAVOR
NOVA_E2E_IMAGE=$IMAGE
NOVA_E2E_ZONES=e2e-az1,e2e-az2,e2e-az3
NOVA_E2E_CLOUDS_YAML=$NOVA_E2E_DIR/clouds.yaml
NOVA_E2E_CLOUD=nova-e2e
ENV
cat >"$NOVA_E2E_DIR/clouds.yaml" <<YAML
# The real-Nova test cloud (scripts/nova): test-only, local credentials.
clouds:
  nova-e2e:
    auth:
      auth_url: $KS/v3
      username: admin
      password: $NOVA_E2E_ADMIN_PW
      project_name: admin
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    interface: public
    identity_api_version: 3
YAML
mv -f "$NOVA_E2E_DIR/env.tmp" "$NOVA_E2E_DIR/env"
log "up: env file $NOVA_E2E_DIR/env, clouds.yaml $NOVA_E2E_DIR/clouds.yaml"
