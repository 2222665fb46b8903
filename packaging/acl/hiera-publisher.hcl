# Consul ACL policy for the catalog change feed's publisher, `hiera-services
# --publish` (orchestrate-hiera-publisher.service on the bootstrap node(s);
# docs/hiera-services.md, "The catalog change feed"). It writes the feed,
# <prefix>/hierafeed/ (its lock and head, one record per service), and
# nothing else; every node's token (node.hcl) reads it and none writes it.
# Written for the default KV prefix "orchestrate": with another prefix,
# replace "orchestrate/" below.
#
#   consul acl policy create -name orchestrate-hiera-publisher \
#     -rules @/usr/share/orchestrate/acl/hiera-publisher.hcl

# The feed: the lock and head hierafeed/leader, the records
# hierafeed/services/<service>.
key_prefix "orchestrate/hierafeed/" {
  policy = "write"
}

# The lock's session, created on the publisher's own node.
session_prefix "" {
  policy = "write"
}

# Every service's health (one blocking query per service) and the service
# list: without read of every node and service the feed would miss the
# changes the token cannot see.
node_prefix "" {
  policy = "read"
}
service_prefix "" {
  policy = "read"
}
