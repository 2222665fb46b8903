package reaper

import (
	"fmt"
)

// MetricReading is an autoscaled role's metric as read this cycle from a
// source outside Consul KV (Prometheus). The consul source's reports are
// in Input.Scaling.
type MetricReading struct {
	// Value is the role's per-node value.
	Value float64
	// PerHost holds each host's own value, when the source gives them
	// (a host query): scale in then removes the least loaded.
	PerHost map[string]float64
	// Err says why no usable value was read ("" when Value is good).
	Err string
}

// ScaleChange is a desired count the autoscaler changes: written by the
// executor (with the leader check, and only while no override stands and
// the count is still From), acted on by the next cycle.
type ScaleChange struct {
	Role     string `json:"role"`
	From, To int
	// Index is the modify index of roles/<role>/desired when read (0: the
	// key did not exist).
	Index  uint64 `json:"-"`
	Reason string `json:"reason"`
}

// String describes the change for logs.
func (c ScaleChange) String() string {
	return fmt.Sprintf("scale %s from %d to %d (%s)", c.Role, c.From, c.To, c.Reason)
}
