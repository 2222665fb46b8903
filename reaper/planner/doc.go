// Package planner is the reaper's decision: Plan turns one reaper.Input
// (the Nova list, the checks, the journal, the KV records and the leader's
// memory of earlier cycles) into a reaper.Plan. It does no I/O, so the
// same Input gives the same Plan; TestPlannerImportsNoIO keeps it so.
package planner
