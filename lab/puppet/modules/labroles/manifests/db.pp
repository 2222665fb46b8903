# @summary Role db, the database tier: needs no other host.
#
# The consistent step of a db host: its service (labroles::service,
# HTTP on `port`, registered in Consul as db with an HTTP check) and
# class orchestrate with the role's dependencies (labroles::node). Its
# eventual step is labroles::db::config. Every parameter comes from the
# module's hiera data (data/common.yaml) unless the environment's overrides it.
#
# @param port         the service's TCP port
# @param dependencies what the role needs from other hosts (Consul service => counts)
# @param reads        what else its configuration reads
# @param watch_args   more `orchestrate watch-config` arguments
class labroles::db (
  Integer[1, 65535]                        $port,
  Hash[String[1], Orchestrate::Dependency] $dependencies,
  Array[Orchestrate::Servicename]          $reads      = [],
  Array[String[1]]                         $watch_args = [],
) {
  labroles::service { 'db': port => $port }
  class { 'labroles::node':
    role         => 'db',
    dependencies => $dependencies,
    reads        => $reads,
    watch_args   => $watch_args,
  }
}
