# @summary Blocks the catalog until enough endpoints of a service exist in Consul.
#
# Execs orchestrate's service-blocker, which waits, woken by the local Consul
# agent's change notification, until at least `count` instances of `service`
# resolve in its DNS (mode `addressable`) or also pass all their checks and
# accept a TCP connection on their port (mode `functional`). Resources that
# need the service go after it:
#
#   orchestrate::service_blocker { 'mysql': count => 2, mode => 'functional' }
#   -> Keystone_config['database/connection']
#
# When the service is already there, the `unless` check (one poll, at most
# `check_timeout` seconds) skips the exec and the run reports no change.
# Otherwise the exec waits up to `timeout` seconds (0: for ever) and, if
# still short, fails with the blocker's own message, such as
# "service-blocker: timed out: mysql: 1/2 after 10m0s", so every resource
# depending on it is skipped.
#
# The exec's own timeout is the blocker's plus `grace` seconds, so the
# blocker always gives up first and says why; Puppet's default exec timeout
# (300 s) would otherwise kill a 10-minute wait half way with no message.
#
# @param service      the Consul service name (default: the title)
# @param count        how many endpoints are needed (at least 1)
# @param mode         'addressable' or 'functional'
# @param service_tag  only instances with this Consul tag (`tag` is a
#                     Puppet metaparameter, hence the name)
# @param datacenter   ask this datacenter instead of the agent's
# @param passing_only count only instances whose checks all pass (asks the
#                     agent's HTTP API; Consul DNS also returns warning ones)
# @param dns          the Consul agent's DNS address
# @param consul_addr  the agent's HTTP address (watching, functional mode,
#                     passing_only)
# @param token_file   file with a Consul ACL token for that address; the
#                     token itself never appears in the command line
# @param timeout      seconds to wait in all; 0 waits for ever
# @param interval     first pause between polls (a Go duration)
# @param max_interval longest pause between polls (a Go duration)
# @param check_timeout seconds the `unless` check may take
# @param grace        seconds the exec's timeout adds to the blocker's
# @param binary       path of the service-blocker binary
define orchestrate::service_blocker (
  String[1]                         $service       = $title,
  Integer[1]                        $count         = 1,
  Enum['addressable', 'functional'] $mode          = 'addressable',
  Optional[String[1]]               $service_tag   = undef,
  Optional[String[1]]               $datacenter    = undef,
  Boolean                           $passing_only  = false,
  String[1]                         $dns           = '127.0.0.1:8600',
  Optional[String[1]]               $consul_addr   = undef,
  Optional[String[1]]               $token_file    = undef,
  Integer[0]                        $timeout       = 600,
  String[1]                         $interval      = '500ms',
  String[1]                         $max_interval  = '5s',
  Integer[1]                        $check_timeout = 2,
  Integer[0]                        $grace         = 30,
  String[1]                         $binary        = '/usr/bin/service-blocker',
) {
  $tag_args = $service_tag ? { undef => [], default => ['--tag', $service_tag] }
  $dc_args = $datacenter ? { undef => [], default => ['--datacenter', $datacenter] }
  $passing_args = $passing_only ? { true => ['--passing-only'], default => [] }
  $addr_args = $consul_addr ? { undef => [], default => ['--consul-addr', $consul_addr] }
  $token_args = $token_file ? { undef => [], default => ['--token-file', $token_file] }

  $common = [$binary, '--dns', $dns, '--mode', $mode] + $tag_args + $dc_args + $passing_args + $addr_args + $token_args

  $exec_timeout = $timeout ? { 0 => 0, default => $timeout + $grace }

  exec { "service-blocker ${title}":
    command   => $common + ['--timeout', "${timeout}s", '--interval', $interval, '--max-interval', $max_interval, "${service}:${count}"],
    unless    => [$common + ['--quiet', '--log-level', 'error', '--timeout', "${check_timeout}s", "${service}:${count}"]],
    timeout   => $exec_timeout,
    logoutput => true,
  }
}
