# @summary The eventual step of a lb host: config.json of its service
# with what it reads from other hosts (labroles::config), once its
# dependencies are there.
class labroles::lb::config {
  labroles::config { 'lb':
    dependencies => lookup('labroles::lb::dependencies'),
  }
}
