# Consul ACL policy for a lifecycle hook handler (docs/acl.md): an external
# inventory, a cache warmer or the platform answering the reaper's hooks
# (a role's on_launch and on_terminate) with `orchestrate hook complete
# ROLE HOST continue|abandon`, woken by the reaper-hook event or a key
# watch on the requests. No node's token holds it: a node does not answer
# its own hook (the hook is another system's gate on it, which the node
# must not be able to pass by itself) nor another's. Written for the
# default KV prefix "orchestrate": with another prefix, replace
# "orchestrate/" below; to confine a handler to one role, write its rule
# as key_prefix "orchestrate/hook-answer/ROLE/".
#
#   consul acl policy create -name orchestrate-hook-handler \
#     -rules @/usr/share/orchestrate/acl/hook-handler.hcl

# The requests (hook/) and everything else under the prefix: read.
key_prefix "orchestrate/" {
  policy = "read"
}

# The answers, one per role and host: hook-answer/<role>/<host>.
key_prefix "orchestrate/hook-answer/" {
  policy = "write"
}

# The reaper's event for each hook it asks, for `consul watch -type event
# -name reaper-hook`.
event "reaper-hook" {
  policy = "read"
}
