# @summary A Consul service name as orchestrate's hiera keys take it
# (services::NAME::...): letters, digits, '_' and '-', 1 to 255 of them.
type Orchestrate::Servicename = Pattern[/\A[A-Za-z0-9_-]{1,255}\z/]
