// Package reaper holds the domain of the reaper, which keeps every role at
// its desired count of healthy, young machines through OpenStack Nova,
// under a Consul session lock: its configuration, the servers, the Cloud
// interface, the journal entry and the planner's Input and Plan. It does
// no I/O.
//
// Several reapers may run; the one holding the leader lock acts, the others
// wait to take over (reaper/daemon). While it leads, the reaper runs one
// cycle every interval, in three steps. Observe (daemon) reads the whole
// picture at once: one Nova list, one Consul health query, the desired
// counts and validation results, and the reaper's journal; anything
// unreadable or hidden by ACLs means no action that cycle. Plan
// (reaper/planner) is pure: from that picture and the leader's memory of
// earlier cycles it decides which servers to create, drain, delete or
// forget, and which it must not touch yet because the start gate is
// closed, too much of the fleet looks unhealthy, or the hourly budget is
// spent. Act (daemon) carries the actions out, each journal entry written
// under the leader check before its cloud call, so a new leader finishes
// or undoes what a dead one started. The cycle ends by writing its report
// to Consul and the metrics. The clouds are reaper/nova and
// reaper/simcloud; reaper/README.md maps the code.
package reaper
