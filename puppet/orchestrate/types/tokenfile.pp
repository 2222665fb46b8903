# @summary A Consul token file on the node, or 'none' (no Consul ACLs).
type Orchestrate::Tokenfile = Variant[Orchestrate::Absolutepath, Enum['none']]
