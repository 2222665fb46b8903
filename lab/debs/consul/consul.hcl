# /etc/consul.d/consul.hcl: the package's agent configuration, the data
# directory only, as HashiCorp's package ships it. Every other setting
# comes from files the node's user data or Puppet write beside it
# (consul agent reads every .hcl and .json file here, in lexical order; a
# later file's single value overrides an earlier one's).
data_dir = "/opt/consul"
