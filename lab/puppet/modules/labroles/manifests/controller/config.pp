# @summary The eventual step of a controller host: config.json of its service
# with what it reads from other hosts (labroles::config), once its
# dependencies are there.
class labroles::controller::config {
  labroles::config { 'controller':
    dependencies => lookup('labroles::controller::dependencies'),
  }
}
