# @summary An absolute path on the node (no stdlib needed).
type Orchestrate::Absolutepath = Pattern[/\A\/[^\s\0]*\z/]
