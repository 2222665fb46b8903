# Consul ACL policy for every node's token (README: "Consul ACL tokens"):
# what orchestrate (converge, report-version, update-status, pending-update,
# the watch handlers), hiera-services and service-blocker --passing-only
# need on a node. Written for the default KV prefix "orchestrate": with
# another --prefix, replace "orchestrate/" below.
#
#   consul acl policy create -name orchestrate-node \
#     -rules @/usr/share/orchestrate/acl/node.hcl
#
# Any node holding it may rewrite any host's status, version, metric and
# drain records:
# Consul's key rules are prefixes, and the host is the last segment of
# those keys. README, "Can one node rewrite another's status?", shows the
# per-host policy that confines status records to the node's own keys.

# The desired version, rollouts, every host's records: read.
key_prefix "orchestrate/" {
  policy = "read"
}

# Its version: running_version/<version>/<host>, moved in one transaction.
key_prefix "orchestrate/running_version/" {
  policy = "write"
}

# Its status: status/<category>/<state>/<host>, moved in one transaction.
key_prefix "orchestrate/status/" {
  policy = "write"
}

# Its load for the autoscaler (orchestrate report-metric):
# metrics/<role>/<host>/<name>.
key_prefix "orchestrate/metrics/" {
  policy = "write"
}

# The answer to a drain request (orchestrate drain, orchestrate drained):
# drain/<host>.
key_prefix "orchestrate/drain/" {
  policy = "write"
}

# converge's rolling-update slots and progress: rollout/<role>/slot/<host>
# (held by a session) and rollout/<role>/hosts/<host>. The per-host policy
# (store.HostPolicyRules) grants exactly those two keys of the node's own.
key_prefix "orchestrate/rollout/" {
  policy = "write"
}

# The doorbells of the roles that roll out after the node's own
# (wake/<role>), rung when it reports a version; nobody reads what they
# hold, so any node may ring any of them.
key_prefix "orchestrate/wake/" {
  policy = "write"
}

# The session that holds a rollout slot (created on the local agent's node).
session_prefix "" {
  policy = "write"
}

# The catalog and health, read by hiera-services, service-blocker
# --passing-only, orchestrate status and the watches.
node_prefix "" {
  policy = "read"
}
service_prefix "" {
  policy = "read"
}

# The local agent's node name, the default --host.
agent_prefix "" {
  policy = "read"
}
