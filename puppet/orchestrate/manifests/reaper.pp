# @summary The reaper on the bootstrap node(s).
#
# Writes /etc/orchestrate/reaper.yaml from parameters (checked by `reaper
# --check-config` before it replaces the file), the reaper's Consul token
# and OpenStack credentials (mode 0600, owner orchestrate), the service's
# environment file, and runs the orchestrate-reaper service.
#
# The reaper runs in dry run (it logs what it would do and does nothing)
# unless this class is given `dry_run => false`. Puppet never arms it: the
# first destructive action waits until every role reached its count with
# validation success once, or an operator runs `orchestrate reaper arm`.
#
# @param roles     the roles the reaper keeps (at least one)
# @param dry_run   false lets the reaper act
# @param settings
#   any other top-level reaper.yaml field (interval, max_in_flight,
#   max_actions_per_hour, session_ttl, ...), as reaper(1) documents them
# @param cloud_name  the clouds.yaml entry (OS_CLOUD)
# @param region      the cloud region
# @param clouds
#   clouds.yaml's `clouds:` hash (auth, region_name, ...), written to
#   `clouds_file` mode 0600; undef leaves that file alone
# @param consul_token the reaper's Consul ACL token (shipped policy
#   reaper.hcl), written to `token_file` mode 0600; undef leaves it alone
# @param consul_addr  the Consul agent's HTTP address
# @param config_file  reaper.yaml
# @param env_file     the service's environment file
# @param token_file   the Consul token file
# @param clouds_file  clouds.yaml
# @param owner        owner of the secret files (the service's user)
# @param group        their group
# @param reaper_bin   the reaper binary, which checks the configuration
# @param manage_service run the orchestrate-reaper service (enabled, running)
# @param service_name the service
class orchestrate::reaper (
  Array[Orchestrate::Role, 1]               $roles,
  Boolean                                   $dry_run        = true,
  Hash[Pattern[/\A[a-z][a-z0-9_]*\z/], Data] $settings      = {},
  Pattern[/\A[A-Za-z0-9_.-]+\z/]              $cloud_name     = 'orchestrate',
  Optional[String[1]]                       $region         = undef,
  Optional[Sensitive[Hash[String[1], Data, 1]]] $clouds     = undef,
  Optional[Sensitive[String[1]]]            $consul_token   = undef,
  Pattern[/\A[^\s]+\z/]                     $consul_addr    = '127.0.0.1:8500',
  Orchestrate::Absolutepath                 $config_file    = '/etc/orchestrate/reaper.yaml',
  Orchestrate::Absolutepath                 $env_file       = '/etc/orchestrate/reaper.env',
  Orchestrate::Absolutepath                 $token_file     = '/etc/orchestrate/reaper.token',
  Orchestrate::Absolutepath                 $clouds_file    = '/etc/orchestrate/clouds.yaml',
  String[1]                                 $owner          = 'orchestrate',
  String[1]                                 $group          = 'orchestrate',
  Orchestrate::Absolutepath                 $reaper_bin     = '/usr/bin/reaper',
  Boolean                                   $manage_service = true,
  String[1]                                 $service_name   = 'orchestrate-reaper',
) {
  $owned = ['dry_run', 'roles', 'cloud'].filter |$k| { $k in $settings }
  unless $owned.empty {
    fail("orchestrate::reaper: settings may not hold ${owned.join(', ')}: use the class parameters")
  }

  $cloud = $region ? {
    undef   => { 'name' => $cloud_name, 'clouds_file' => $clouds_file },
    default => { 'name' => $cloud_name, 'clouds_file' => $clouds_file, 'region' => $region },
  }
  $header = [
    "${config_file}: written by Puppet (class orchestrate::reaper); edits",
    'here are overwritten. Fields: reaper(1), /usr/share/doc/orchestrate/reaper.md.gz.',
  ]
  $doc = { 'dry_run' => $dry_run } + $settings + { 'cloud' => $cloud, 'roles' => $roles }
  $notify = $manage_service ? { true => Service[$service_name], default => [] }

  file { $config_file:
    ensure       => file,
    owner        => 'root',
    group        => $group,
    mode         => '0640',
    content      => template('orchestrate/yaml.erb'),
    validate_cmd => "${reaper_bin} --check-config --config %",
    notify       => $notify,
  }

  file { $env_file:
    ensure  => file,
    owner   => 'root',
    group   => $group,
    mode    => '0640',
    content => epp('orchestrate/reaper.env.epp', {
        'consul_addr' => $consul_addr,
        'token_file'  => $token_file,
        'cloud_name'  => $cloud_name,
        'clouds_file' => $clouds_file,
    }),
    notify  => $notify,
  }

  if $consul_token != undef {
    file { $token_file:
      ensure    => file,
      owner     => $owner,
      group     => $group,
      mode      => '0600',
      content   => Sensitive("${consul_token.unwrap}\n"),
      show_diff => false,
      notify    => $notify,
    }
  }

  if $clouds != undef {
    $header_clouds = ["${clouds_file}: written by Puppet (class orchestrate::reaper)."]
    $clouds_doc = { 'clouds' => $clouds.unwrap }
    file { $clouds_file:
      ensure    => file,
      owner     => $owner,
      group     => $group,
      mode      => '0600',
      content   => Sensitive(inline_template("<% require 'yaml' -%># <%= @header_clouds[0] %>\n<%= @clouds_doc.to_yaml.sub(/\\A---\\n/, '') -%>")),
      show_diff => false,
      notify    => $notify,
    }
  }

  if $manage_service {
    service { $service_name:
      ensure => running,
      enable => true,
    }
  }
}
