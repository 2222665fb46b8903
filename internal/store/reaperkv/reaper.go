package reaperkv

import (
	"time"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// Keys of the reaper, under <prefix>/.
const (
	// ReaperDir holds every key of the reaper.
	ReaperDir = "reaper/"
	// ReaperLeaderKey is the Consul lock the active reaper holds.
	ReaperLeaderKey = "reaper/leader"
	// ReaperJournalDir holds one journal entry per operation in flight.
	ReaperJournalDir = "reaper/journal/"
	// ReaperBudgetKey holds when recent destructive actions started.
	ReaperBudgetKey = "reaper/budget"
	// ReaperArmedKey holds the arm record; only a well-formed one arms.
	ReaperArmedKey = "reaper/armed"
	// ReaperStateKey holds the leader's report of its last cycle.
	ReaperStateKey = "reaper/state"
)

// ReaperKey returns <prefix>/<name> for one of the Reaper*Key names.
func ReaperKey(prefix, name string) string { return schema.Join(prefix, name) }

// ArmRecord is the value of <prefix>/reaper/armed: who opened or closed
// the reaper's start gate, when and why.
type ArmRecord struct {
	Time   time.Time `json:"time"`
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	// Disarmed: the record closes the gate (orchestrate reaper disarm). It
	// stays, so the reaper knows it was disarmed and does not arm itself
	// again when the fleet next looks complete.
	Disarmed bool `json:"disarmed,omitempty"`
}

// Arms reports whether the record opens the gate.
func (r ArmRecord) Arms() bool { return !r.Disarmed }
