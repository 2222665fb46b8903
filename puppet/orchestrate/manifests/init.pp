# @summary orchestrate on every node of the cloud.
#
# Installs the orchestrate package, writes the node's dependencies file
# from the hiera hash `orchestrate::dependencies`, and writes the Consul
# agent's watch configuration, as `orchestrate watch-config` prints it, so
# the agent runs hiera-services on every catalog change and `orchestrate
# converge` (or `pending-update`) when the desired version changes.
#
# Puppet reads the data hiera-services writes (`hiera_data_file`) through a
# hierarchy level of its own; add it to the environment's hiera.yaml
# (examples/hiera.yaml in the orchestrate sources):
#
#   - name: "Consul catalog (orchestrate hiera-services)"
#     path: "/var/lib/orchestrate/hiera/services.yaml"
#
# Every path is a parameter. Nothing here starts a service: the Consul
# agent picks the watches up on its next reload (`consul_reload`).
#
# @param dependencies
#   what this node needs from other hosts: SERVICE => {addressable => N,
#   functional => N}; written to `dependencies_file`
# @param manage_package  install the package (`package_ensure`)
# @param package_ensure  the package's ensure (installed, latest, a version)
# @param config_dir      /etc/orchestrate, made by the package
# @param dependencies_file the node's dependencies file
# @param hiera_data_file  the file hiera-services writes (its --out)
# @param manage_watches  write the Consul watch configuration
# @param watch_config_file the Consul agent configuration file of the watches
# @param watch_args
#   more `orchestrate watch-config` arguments, e.g. ['--consistent-cmd',
#   'puppet agent -t --detailed-exitcodes', '--role', 'compute']
# @param reads
#   the services this node's Puppet reads besides its dependencies (the
#   role's list; [] for none): given, the eventual step (or --exec) runs
#   only when their data, the dependencies' or the dependency state
#   changed, and each is watched (watch-config --reads); undef: it runs on
#   any change of `hiera_data_file`
# @param token_file
#   the node's Consul token file, which the watch handlers read (their
#   --token-file); written with `consul_token` when that is given, else
#   it must exist (the user data writes it); 'none' on a cloud without
#   Consul ACLs
# @param consul_token the node's own Consul ACL token: its node identity, the
#   role orchestrate-node (shipped policy node.hcl) and its own policy
#   orchestrate-host-HOST (docs/acl.md)
# @param token_owner  owner of `token_file` (the user the Consul agent runs
#   the handlers as); mode 0600
# @param token_group  group of `token_file`
# @param consul_reload command run after the watch configuration changed;
#   the default signals the agent (SIGHUP through its unit's ExecReload),
#   which needs no ACL token: `consul reload` would need one with agent
#   write, which the node token does not have
# @param orchestrate_bin    the orchestrate binary
# @param hiera_services_bin the hiera-services binary
# @param file_owner owner of the configuration files
# @param file_group group of the configuration files
class orchestrate (
  Hash[Pattern[/\A[A-Za-z0-9][A-Za-z0-9_.-]*\z/], Orchestrate::Dependency] $dependencies = {},
  Boolean                                $manage_package     = true,
  String[1]                              $package_ensure     = 'installed',
  Orchestrate::Absolutepath              $config_dir         = '/etc/orchestrate',
  Orchestrate::Absolutepath              $dependencies_file  = "${config_dir}/dependencies.yaml",
  Orchestrate::Absolutepath              $hiera_data_file    = '/var/lib/orchestrate/hiera/services.yaml',
  Boolean                                $manage_watches     = true,
  Orchestrate::Absolutepath              $watch_config_file  = '/etc/consul.d/orchestrate-watches.json',
  Array[String[1]]                       $watch_args         = [],
  Optional[Array[Orchestrate::Servicename]] $reads = undef,
  Orchestrate::Tokenfile                 $token_file         = "${config_dir}/node.token",
  Optional[Sensitive[String[1]]]         $consul_token       = undef,
  String[1]                              $token_owner        = 'consul',
  String[1]                              $token_group        = 'consul',
  Optional[String[1]]                    $consul_reload      = 'systemctl reload consul',
  Orchestrate::Absolutepath              $orchestrate_bin    = '/usr/bin/orchestrate',
  Orchestrate::Absolutepath              $hiera_services_bin = '/usr/bin/hiera-services',
  String[1]                              $file_owner         = 'root',
  String[1]                              $file_group         = 'root',
) {
  if $consul_token != undef and $token_file == 'none' {
    fail('orchestrate: consul_token needs token_file (where the handlers read it)')
  }

  if $manage_package {
    package { 'orchestrate':
      ensure => $package_ensure,
      before => File[$dependencies_file],
    }
  }

  $header = [
    "${dependencies_file}: written by Puppet (class orchestrate, from the",
    'hiera hash orchestrate::dependencies); edits here are overwritten.',
  ]
  $doc = $dependencies
  file { $dependencies_file:
    ensure  => file,
    owner   => $file_owner,
    group   => $file_group,
    mode    => '0644',
    content => template('orchestrate/yaml.erb'),
  }

  if $consul_token != undef {
    file { $token_file:
      ensure    => file,
      owner     => $token_owner,
      group     => $token_group,
      mode      => '0600',
      content   => Sensitive("${consul_token.unwrap}\n"),
      show_diff => false,
    }
  }

  if $manage_watches {
    $token_args = $token_file ? { 'none' => [], default => ['--handler-token-file', $token_file] }
    $reads_args = $reads ? { undef => [], default => ["--reads=${join($reads, ',')}"] }
    $watch_cmd = shellquote([$orchestrate_bin, 'watch-config',
        '--orchestrate', $orchestrate_bin, '--hiera-services', $hiera_services_bin,
      '--out', $hiera_data_file, '--dependencies', $dependencies_file] + $token_args + $reads_args + $watch_args)
    $file_q = shellquote([$watch_config_file])
    # watch-config asks the local agent for this node's name: with ACLs on,
    # Puppet's environment holds no token, so it uses the node's.
    $token_env = $token_file ? { 'none' => [], default => ["CONSUL_HTTP_TOKEN_FILE=${token_file}"] }
    $watch_needs = $consul_token ? { undef => File[$dependencies_file], default => [File[$dependencies_file], File[$token_file]] }
    # The file is the command's output; rewritten only when that changes,
    # through a temporary file so the agent never reads half of it.
    exec { 'orchestrate watch-config':
      command     => "${watch_cmd} > ${file_q}.tmp && chmod 0644 ${file_q}.tmp && mv ${file_q}.tmp ${file_q}",
      unless      => "${watch_cmd} | cmp -s - ${file_q}",
      environment => $token_env,
      provider    => shell,
      path        => ['/usr/sbin', '/usr/bin', '/sbin', '/bin'],
      require     => $watch_needs,
      logoutput   => on_failure,
    }
    if $consul_reload != undef {
      exec { 'orchestrate: consul reload':
        command     => $consul_reload,
        provider    => shell,
        path        => ['/usr/sbin', '/usr/bin', '/sbin', '/bin'],
        refreshonly => true,
        subscribe   => Exec['orchestrate watch-config'],
      }
    }
  }
}
