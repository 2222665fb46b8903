# Consul ACL policy for the reaper's token (docs/acl.md),
# on the bootstrap node(s). Written for the default KV prefix
# "orchestrate": with another prefix, replace "orchestrate/" below.
#
#   consul acl policy create -name orchestrate-reaper \
#     -rules @/usr/share/orchestrate/acl/reaper.hcl

# The whole prefix: its leader lock, journal and state report under
# reaper/, the arm record, desired counts, and the records of a deleted
# host (running_version/, status/), which it removes with the host.
key_prefix "orchestrate/" {
  policy = "write"
}

# The leader session, created on the reaper's own node.
session_prefix "" {
  policy = "write"
}

# Every node's health and services (read), and write on nodes: the
# maintenance check it registers on a node before draining it and the
# catalog deregistration of a deleted node.
node_prefix "" {
  policy = "write"
}
service_prefix "" {
  policy = "read"
}

# Its own service and TTL check (service_name in reaper.yaml, default
# "reaper"; rename the rule with it).
service "reaper" {
  policy = "write"
}

# The local agent's configuration (the datacenter, its node name).
agent_prefix "" {
  policy = "read"
}

# The Consul event it fires for each activity of its history
# (reaper-activity), for a watch handler to forward.
event "reaper-activity" {
  policy = "write"
}

# The Consul event it fires for each lifecycle hook it asks (reaper-hook),
# for the hook's handler.
event "reaper-hook" {
  policy = "write"
}

# consul force-leave of a deleted node's agent, so its gossip membership
# ends with the machine.
operator = "write"
