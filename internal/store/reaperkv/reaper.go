package reaperkv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
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
	// ReaperHeartbeatKey is the leader's heartbeat: rewritten every
	// heartbeat_interval, it fires every node's heartbeat watch, whose
	// handler writes the node's own hosts/<host>/heartbeat.
	ReaperHeartbeatKey = "reaper/heartbeat"
)

// ReaperKey returns <prefix>/<name> for one of the Reaper*Key names.
func ReaperKey(prefix, name string) string { return schema.Join(prefix, name) }

// JournalKey is the key of journal entry id under prefix.
func JournalKey(prefix, id string) string { return ReaperKey(prefix, ReaperJournalDir+id) }

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

// ParseArmRecord reads the value of the armed key. Only a JSON arm record
// with a time and an author counts: anything else (false, an empty value,
// a word written by hand) is an error naming what is wrong, and the gate
// stays closed.
func ParseArmRecord(data []byte) (ArmRecord, error) {
	var r ArmRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return ArmRecord{}, fmt.Errorf("%s holds %.40q, not an arm record (`orchestrate reaper arm` writes one): %w", ReaperArmedKey, data, err)
	}
	if r.Time.IsZero() || strings.TrimSpace(r.By) == "" {
		return ArmRecord{}, fmt.Errorf("%s holds an arm record without a time or an author: `orchestrate reaper arm` writes a complete one", ReaperArmedKey)
	}
	return r, nil
}
