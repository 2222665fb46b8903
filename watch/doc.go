// Package watch is the plumbing of Consul watch handlers: reading the
// handler's JSON payload from stdin, serialising overlapping runs, running a
// command only when a rendered file changed, and generating the agent's
// watches stanza.
package watch
