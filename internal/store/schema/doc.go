// Package schema holds the records under the prefix that the nodes and the
// operators write and the reaper's planner reads (metric reports, drain
// requests and answers, protections, scale-in requests, desired-count
// overrides, capacity records), the prefix and name rules, and strict JSON
// decoding. It does no I/O: internal/store reads and writes these records
// over Consul KV, and the planner, which must do no I/O, imports only this
// and reaperkv.
package schema
