# @summary Role compute, a compute host: its configuration names the controller; a drain (scale-in) marks it draining.
#
# The consistent step of a compute host: its service (labroles::service,
# HTTP on `port`, registered in Consul as compute with an HTTP check) and
# class orchestrate with the role's dependencies (labroles::node). Its
# eventual step is labroles::compute::config. Every parameter comes from the
# module's hiera data (data/common.yaml) unless the environment's overrides it.
#
# @param port         the service's TCP port
# @param dependencies what the role needs from other hosts (Consul service => counts)
# @param reads        what else its configuration reads
# @param watch_args   more `orchestrate watch-config` arguments
class labroles::compute (
  Integer[1, 65535]                        $port,
  Hash[String[1], Orchestrate::Dependency] $dependencies,
  Array[Orchestrate::Servicename]          $reads      = [],
  Array[String[1]]                         $watch_args = [],
) {
  labroles::service { 'compute': port => $port }
  class { 'labroles::node':
    role         => 'compute',
    dependencies => $dependencies,
    reads        => $reads,
    watch_args   => $watch_args,
  }
}
