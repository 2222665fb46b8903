# @summary One role the reaper keeps (one entry of reaper.yaml `roles:`,
# fields as reaper(1) documents them). Durations are Go durations ("90s",
# "12h"). Puppet checks the shape here; the reaper checks the whole file
# (`reaper --check-config`) before Puppet writes it.
type Orchestrate::Role = Struct[{
  'name'                     => Pattern[/\A[a-z0-9][a-z0-9_-]*\z/],
  'desired'                  => Integer[0],
  'boot'                     => Hash[String[1], Data, 1],
  Optional['name_regex']     => String[1],
  Optional['min_healthy']    => Integer[0],
  Optional['replace_suspect'] => Boolean,
  Optional['checks']         => Array[String[1]],
  Optional['boot_grace']     => String[1],
  Optional['critical_grace'] => String[1],
  Optional['boot_timeout']   => String[1],
  Optional['absent_grace']   => String[1],
  Optional['error_grace']    => String[1],
  Optional['max_age']        => String[1],
  Optional['max_age_jitter'] => String[1],
  Optional['replace_mode']   => Enum['surge', 'delete-first'],
  Optional['drain_timeout']  => String[1],
  # A scale-in's or max-age retirement's drain that fails, or is not
  # answered by drain_timeout: abort (the default: the server stays) or
  # delete (where the nodes run no drain handler).
  Optional['on_drain_failure'] => Enum['abort', 'delete'],
  Optional['on_drain_timeout'] => Enum['abort', 'delete'],
  Optional['drain_cooloff']    => String[1],
}]
