# Example: configure Keystone's database connection only once two MySQL
# servers accept connections, and start Keystone only once it is set.
#
#   puppet apply --modulepath puppet puppet/orchestrate/examples/service_blocker.pp
orchestrate::service_blocker { 'mysql':
  count   => 2,
  mode    => 'functional',
  timeout => 600,
}

# Stands in for Keystone_config['database/connection'] from puppet-keystone.
notify { 'keystone database connection configured':
  require => Orchestrate::Service_blocker['mysql'],
}
