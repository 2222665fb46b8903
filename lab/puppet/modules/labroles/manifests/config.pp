# @summary A role's eventual step: what it reads from other hosts, written
# to its service's config.json once they are there.
#
# The addresses come from the hiera data hiera-services writes
# (services::SERVICE::address). While the data lists fewer than a
# dependency's count the catalog fails, naming what it waits for: converge
# records the step pending, not failed, since the dependencies are unmet.
# Once they are listed, an orchestrate::service_blocker per dependency
# waits until that many resolve in Consul DNS (registered and not
# critical; with a functional count, passing every check and accepting
# TCP) before the file is written.
#
# @param dependencies the role's dependencies: SERVICE => counts
define labroles::config (
  Hash[String[1], Orchestrate::Dependency] $dependencies = {},
) {
  include labroles
  # [service, count, blocker mode]: a functional count is waited for as
  # functional, else the addressable one.
  $need = $dependencies.map |$svc, $counts| {
    $functional = $counts['functional'].lest || { 0 }
    $addressable = $counts['addressable'].lest || { 0 }
    $functional ? {
      0       => [$svc, $addressable, 'addressable'],
      default => [$svc, max($functional, $addressable), 'functional'],
    }
  }
  $addresses = $need.reduce({}) |$memo, $pair| {
    $memo + { $pair[0] => lookup("services::${pair[0]}::address", Array[String], 'first', []) }
  }
  $short = $need.filter |$pair| { length($addresses[$pair[0]]) < $pair[1] }
  unless empty($short) {
    $waiting = $short.map |$pair| { "${pair[0]} (${length($addresses[$pair[0]])} of ${pair[1]})" }
    fail("labroles::${title}::config: waiting for ${join($waiting, ', ')}")
  }

  $doc = { 'role' => $title, 'host' => $facts['networking']['hostname'], 'services' => $addresses }
  $config = "${labroles::base_dir}/${title}/www/config.json"
  $need.each |$pair| {
    orchestrate::service_blocker { $pair[0]:
      count   => $pair[1],
      mode    => $pair[2],
      timeout => $labroles::blocker_timeout,
      binary  => $labroles::service_blocker_bin,
      dns     => $labroles::consul_dns,
      before  => File[$config],
    }
  }
  file { $config:
    ensure  => file,
    owner   => 'root',
    group   => 'root',
    mode    => '0644',
    content => template('labroles/json.erb'),
  }
}
