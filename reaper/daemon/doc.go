// Package daemon is the reaper as a program: its command line, the
// configuration's files, leadership under a Consul session lock, and each
// cycle's observation of Nova and Consul, its plan (reaper/planner) and the
// execution of that plan, journalled in Consul KV before every cloud call.
package daemon
