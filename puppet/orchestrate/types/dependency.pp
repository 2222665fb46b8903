# @summary One entry of a node's dependencies file: how many instances of a
# Consul service must be addressable (in Consul DNS) and functional
# (passing) before this node's configuration can work; a missing count is 0.
type Orchestrate::Dependency = Struct[{
  Optional['addressable'] => Integer[0],
  Optional['functional']  => Integer[0],
}]
