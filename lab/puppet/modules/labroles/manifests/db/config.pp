# @summary The eventual step of a db host: config.json of its service
# with what it reads from other hosts (labroles::config), once its
# dependencies are there.
class labroles::db::config {
  labroles::config { 'db':
    dependencies => lookup('labroles::db::dependencies'),
  }
}
