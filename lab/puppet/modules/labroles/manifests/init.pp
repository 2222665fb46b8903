# @summary Settings every role of the orchestrate lab shares.
#
# The roles are classes of their own (labroles::db, labroles::lb,
# labroles::controller, labroles::compute), each the consistent step of
# its hosts' converge; labroles::ROLE::config is the eventual step, which
# writes what the role reads from other hosts. This class only holds what
# they share; every value is a parameter (hiera: labroles::base_dir, ...).
#
# @param base_dir      each role's service serves BASE_DIR/ROLE/www
# @param validate_dir  the role's validation checks (converge --validate-dir)
# @param fail_file     while this file exists every validation check fails:
#   the lab's way to make a role's validation fail on chosen hosts
# @param consul_config_dir where the service definitions go
# @param consul_reload run after a service definition changed; does nothing
#   when the agent is not running (it reads the file when it starts)
# @param blocker_timeout seconds each orchestrate::service_blocker waits
# @param service_blocker_bin the service-blocker binary
# @param consul_dns    the local agent's DNS, which the blockers ask
# @param puppet_apply  the command converge runs the role's classes with
# @param update_cmd    converge's update step (--update-cmd): the lab's
#   packages from its repository, the operator's edits kept
class labroles (
  Orchestrate::Absolutepath $base_dir            = '/var/lib/labroles',
  Orchestrate::Absolutepath $validate_dir        = '/var/lib/labroles/validate',
  Orchestrate::Absolutepath $fail_file           = '/etc/labroles/fail-validation',
  Orchestrate::Absolutepath $consul_config_dir   = '/etc/consul.d',
  String[1]                 $consul_reload       = 'systemctl try-reload-or-restart consul',
  Integer[0]                $blocker_timeout     = 120,
  Orchestrate::Absolutepath $service_blocker_bin = '/usr/bin/service-blocker',
  String[1]                 $consul_dns          = '127.0.0.1:8600',
  String[1]                 $puppet_apply        = 'puppet apply --detailed-exitcodes --color=false',
  String[1]                 $update_cmd          = join(['apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y',
    '-o Dpkg::Options::=--force-confold --only-upgrade orchestrate orchestrate-lab-roles'], ' '),
) {
  file { [$base_dir, $validate_dir]:
    ensure => directory,
    owner  => 'root',
    group  => 'root',
    mode   => '0755',
  }

  exec { 'labroles: consul reload':
    command     => $consul_reload,
    provider    => shell,
    path        => ['/usr/sbin', '/usr/bin', '/sbin', '/bin'],
    refreshonly => true,
  }

  exec { 'labroles: systemd daemon-reload':
    command     => 'systemctl daemon-reload',
    path        => ['/usr/sbin', '/usr/bin', '/sbin', '/bin'],
    refreshonly => true,
  }
}
