package schema

import (
	"time"
)

// MetricReport is the value of hosts/<host>/metrics/<name>: one node's
// utilization, as it last reported it. Role is the role the node said it
// is of: shown to readers, never used by the reaper, which knows each
// server's role itself (a node must not vote in another role).
type MetricReport struct {
	Role  string    `json:"role,omitempty"`
	Value float64   `json:"value"`
	Time  time.Time `json:"time"`
}

// DrainRecord is the value of drain/<host>: the reaper asks the node (or
// the platform) to move its work away before the server is deleted. Only
// the reaper writes it; the answer is the host's own record
// (DrainAnswerKey), which counts only when it names the request's Entry.
type DrainRecord struct {
	Requested time.Time `json:"requested"`
	Role      string    `json:"role"`
	// Entry is the journal entry that drains the host.
	Entry  string `json:"entry"`
	Reason string `json:"reason"`
	// Deadline is when the drain ends without an answer (drain_timeout
	// after the request).
	Deadline time.Time `json:"deadline"`
	// OnFailure and OnTimeout say what a failed answer, and no answer by
	// the deadline, lead to: DrainAbort (the server stays) or DrainDelete.
	// Empty in a request written before they existed: delete.
	OnFailure string `json:"on_failure,omitempty"`
	OnTimeout string `json:"on_timeout,omitempty"`
	// Answer is, as read, the answer to this request (nil: none yet). In
	// the key it is only found as the older layout wrote it (a node
	// answered inside the request); the reaper never writes it.
	Answer *DrainAnswer `json:"answer,omitempty"`
}

// DrainAnswer is the node's or the platform's answer to a drain request,
// the value of hosts/<host>/drain.
type DrainAnswer struct {
	// Entry is the journal entry of the request answered (empty in an
	// answer the older layout kept inside its request).
	Entry string    `json:"entry,omitempty"`
	Time  time.Time `json:"time"`
	By    string    `json:"by"`
	// Drained: the work moved away. False: moving it failed (Detail says
	// how); the request's OnFailure says what follows.
	Drained bool   `json:"drained"`
	Detail  string `json:"detail,omitempty"`
}

// Protection is the value of protect/<host>: the host is never chosen for
// scale-in (it is still replaced when unhealthy).
type Protection struct {
	Time   time.Time `json:"time"`
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
}

// CapacityRecord is the value of capacity/<role>: creates of the role fail
// because the project's quota or the cloud's capacity is exhausted. The
// reaper writes it on such a failure and removes it when a server it
// created for the role goes ACTIVE.
type CapacityRecord struct {
	State string `json:"state"`
	// Class is "quota" or "capacity" (no valid host).
	Class  string `json:"class"`
	Reason string `json:"reason"`
	// Since is the first failure; Time the latest.
	Since time.Time `json:"since"`
	Time  time.Time `json:"time"`
}

// Override is the value of roles/<role>/override: the desired count was set
// by hand. For an autoscaled role it stands until `orchestrate scale ROLE
// --auto` removes it.
type Override struct {
	Count  int       `json:"count"`
	Time   time.Time `json:"time"`
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
}

// ScaleInRequest is the value of roles/<role>/scale_in/<host>: the host was
// named to leave the role (its desired count was lowered with it).
type ScaleInRequest struct {
	Time time.Time `json:"time"`
	By   string    `json:"by"`
}

// Scaling is the autoscaling and scale-in part of a snapshot.
type Scaling struct {
	// Metrics holds each host's reports: host -> name.
	Metrics map[string]map[string]MetricReport
	// Drains holds each host's drain request, with its answer.
	Drains map[string]DrainRecord
	// Protected holds the protected hosts.
	Protected map[string]Protection
	// Capacity holds the roles whose capacity is exhausted.
	Capacity map[string]CapacityRecord
	// Overrides holds the desired counts set by hand.
	Overrides map[string]Override
	// ScaleIn holds the hosts named for scale-in: role -> host.
	ScaleIn map[string]map[string]ScaleInRequest
	// DesiredIndex holds the modify index of each roles/<role>/desired, for
	// a check-and-set of the count.
	DesiredIndex map[string]uint64
}
