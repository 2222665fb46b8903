# @summary One role's service: a small HTTP server run by systemd and
# registered in the local Consul agent with an HTTP check, and the role's
# validation check.
#
# The server is `python3 -m http.server PORT` (unit lab-SERVICE, a dynamic
# user, on every address) serving BASE_DIR/SERVICE/www: an index saying
# which host it is and, once the role's eventual step ran, config.json
# with what the role read from other hosts. The agent checks
# http://127.0.0.1:PORT/ every 5 s; the validation check (converge
# --validate-dir) fetches config.json, so a host validates only once its
# service answers with its configuration written.
#
# @param port    the TCP port
# @param service the Consul service name, the title by default (the role)
define labroles::service (
  Integer[1, 65535]         $port,
  Orchestrate::Servicename  $service = $title,
) {
  include labroles
  $dir = "${labroles::base_dir}/${service}"
  $unit = "/etc/systemd/system/lab-${service}.service"

  file { [$dir, "${dir}/www"]:
    ensure => directory,
    owner  => 'root',
    group  => 'root',
    mode   => '0755',
  }
  file { "${dir}/www/index.html":
    ensure  => file,
    owner   => 'root',
    group   => 'root',
    mode    => '0644',
    content => "${service} on ${facts['networking']['hostname']}\n",
  }
  file { $unit:
    ensure  => file,
    owner   => 'root',
    group   => 'root',
    mode    => '0644',
    content => epp('labroles/unit.epp', { 'service' => $service, 'port' => $port, 'www' => "${dir}/www" }),
    notify  => Exec['labroles: systemd daemon-reload'],
  }
  service { "lab-${service}":
    ensure    => running,
    enable    => true,
    subscribe => File[$unit],
    require   => [File["${dir}/www/index.html"], Exec['labroles: systemd daemon-reload']],
  }

  # The registration, once the service answers (the check passes at once).
  $doc = {
    'service' => {
      'name'  => $service,
      'port'  => $port,
      'tags'  => ['orchestrate-lab'],
      'check' => {
        'id'       => "lab-${service}-http",
        'name'     => "${service} answers HTTP",
        'http'     => "http://127.0.0.1:${port}/",
        'interval' => '5s',
        'timeout'  => '2s',
      },
    },
  }
  file { "${labroles::consul_config_dir}/labroles-${service}.json":
    ensure  => file,
    owner   => 'root',
    group   => 'root',
    mode    => '0644',
    content => template('labroles/json.erb'),
    require => Service["lab-${service}"],
    notify  => Exec['labroles: consul reload'],
  }

  file { "${labroles::validate_dir}/${service}":
    ensure  => file,
    owner   => 'root',
    group   => 'root',
    mode    => '0755',
    content => epp('labroles/validate.epp', { 'service' => $service, 'port' => $port, 'fail_file' => $labroles::fail_file }),
  }
}
