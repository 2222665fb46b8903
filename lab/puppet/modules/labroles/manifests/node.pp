# @summary class orchestrate as every lab host has it: the role's
# dependencies (the module's hiera data), and watches that run the role's
# classes through converge.
#
# converge's consistent step applies labroles::ROLE, its eventual step
# labroles::ROLE::config (both with `labroles::puppet_apply`), its update
# step `labroles::update_cmd`, and it validates with the checks in
# `labroles::validate_dir`; the node takes one of the role's update slots
# (--role) for a rollout.
#
# @param role         the role: its classes and its update slots
# @param dependencies what the role needs from other hosts
# @param reads        what else the role's configuration reads
# @param watch_args   more `orchestrate watch-config` arguments
class labroles::node (
  Orchestrate::Servicename                         $role,
  Hash[String[1], Orchestrate::Dependency]         $dependencies = {},
  Array[Orchestrate::Servicename]                  $reads        = [],
  Array[String[1]]                                 $watch_args   = [],
) {
  include labroles
  class { 'orchestrate':
    dependencies => $dependencies,
    reads        => $reads,
    watch_args   => [
      '--role', $role,
      '--consistent-cmd', "${labroles::puppet_apply} --execute 'include labroles::${role}'",
      '--eventual-cmd', "${labroles::puppet_apply} --execute 'include labroles::${role}::config'",
      "--converge-arg=--validate-dir=${labroles::validate_dir}",
      "--converge-arg=--update-cmd=${labroles::update_cmd}",
    ] + $watch_args,
  }
}
