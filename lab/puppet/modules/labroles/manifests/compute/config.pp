# @summary The eventual step of a compute host: config.json of its service
# with what it reads from other hosts (labroles::config), once its
# dependencies are there.
class labroles::compute::config {
  labroles::config { 'compute':
    dependencies => lookup('labroles::compute::dependencies'),
  }
}
