# @summary Role controller, the controller: its configuration lists two databases and the load balancer.
#
# The consistent step of a controller host: its service (labroles::service,
# HTTP on `port`, registered in Consul as controller with an HTTP check) and
# class orchestrate with the role's dependencies (labroles::node). Its
# eventual step is labroles::controller::config. Every parameter comes from the
# module's hiera data (data/common.yaml) unless the environment's overrides it.
#
# @param port         the service's TCP port
# @param dependencies what the role needs from other hosts (Consul service => counts)
# @param reads        what else its configuration reads
# @param watch_args   more `orchestrate watch-config` arguments
class labroles::controller (
  Integer[1, 65535]                        $port,
  Hash[String[1], Orchestrate::Dependency] $dependencies,
  Array[Orchestrate::Servicename]          $reads      = [],
  Array[String[1]]                         $watch_args = [],
) {
  labroles::service { 'controller': port => $port }
  class { 'labroles::node':
    role         => 'controller',
    dependencies => $dependencies,
    reads        => $reads,
    watch_args   => $watch_args,
  }
}
