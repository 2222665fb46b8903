# Consul ACL policy for an operator's read-only view (docs/acl.md):
# orchestrate status, get-failures, verify-hosts,
# hosts-at-version, running-versions, current-version, reaper status and
# the rollout views; nothing it holds can change the cloud. Changing it
# (trigger-update, scale, reaper arm, rollout policy) takes a token with
# key write under the prefix. Written for the default KV prefix
# "orchestrate": with another prefix, replace "orchestrate/" below.
#
#   consul acl policy create -name orchestrate-operator \
#     -rules @/usr/share/orchestrate/acl/operator.hcl

key_prefix "orchestrate/" {
  policy = "read"
}
node_prefix "" {
  policy = "read"
}
service_prefix "" {
  policy = "read"
}
