// Package schema holds the formats of the records under the prefix that
// the reaper's planner reads, with the one spelling of their keys, and no
// I/O: internal/store reads and writes them over Consul KV, and the
// planner, which must do no I/O, imports only this.
package schema
