# Consul ACL policy of the role every node's token holds, orchestrate-node
# (docs/acl.md): what orchestrate (converge, report-version,
# update-status, pending-update, report-metric, drain, drained, the watch
# handlers), hiera-services and service-blocker --passing-only read on a
# node. It writes no host's record: each node's token also holds its own
# policy, orchestrate-host-<host>, which writes that host's records and
# nothing else (<prefix>/hosts/<host>/, its rollout slot and progress, its
# sessions: store.HostPolicyRules renders it), and its node identity.
# Written for the default KV prefix "orchestrate": with another --prefix,
# replace "orchestrate/" below.
#
#   consul acl policy create -name orchestrate-node \
#     -rules @/usr/share/orchestrate/acl/node.hcl
#   consul acl role create -name orchestrate-node -policy-name orchestrate-node

# The desired version, rollouts, every host's records, drain requests: read.
key_prefix "orchestrate/" {
  policy = "read"
}

# The hosts' upload grants for their failure logs in Swift (each a bearer
# credential): denied to every node; each host's own policy reads its own
# key only (store.HostPolicyRules). An exact key rule outranks this prefix.
key_prefix "orchestrate/loggrants/" {
  policy = "deny"
}

# The doorbells of the roles that roll out after the node's own
# (wake/<role>), rung when it reports a version; nobody reads what they
# hold, so any node may ring any of them.
key_prefix "orchestrate/wake/" {
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
