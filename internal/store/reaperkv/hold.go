package reaperkv

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// A hold keeps a failing server for a human, as nodepool's autohold does:
// out of service (Consul node maintenance, which the reaper sets from
// afar) and out of the reaper's reach (never deleted, repaired, drained,
// refreshed or scaled in), while its role's replacement is built. An
// operator writes one with `orchestrate hold HOST --reason R --for D`; the
// reaper writes one itself for the first hold_failures failures of a role.
// Only tokens that write the whole prefix (the operator's, the reaper's)
// write under <prefix>/reaper/: a node's token reads it and writes none of
// it, so a node cannot hold itself out of the reaper's reach.
const (
	// ReaperHoldDir holds one record per held host.
	ReaperHoldDir = "reaper/hold/"
	// MaxHoldFor bounds a hold's length (until - time): a week covers a
	// weekend's wait for the right engineer; a hold meant for longer is a
	// server taken out of the fleet, which scale and protect say better.
	MaxHoldFor = 7 * 24 * time.Hour
	// MaxHoldSkew is how far in the future (by the reaper's clock) a
	// record's time may be: an operator's clock a little ahead is no
	// fault, a record dated hours ahead was not written now and is not
	// honoured (its until could not be trusted either).
	MaxHoldSkew = 10 * time.Minute
	// MaxHoldReason bounds a hold's reason: it is copied into the
	// reaper's state report (up to max_held per role), its history and the
	// node's maintenance notes.
	MaxHoldReason = 500
	// DefaultMaxHeld is a role's max_held when its configuration names
	// none: one server kept for a human at a time per role.
	DefaultMaxHeld = 1
	// HoldNotesPrefix starts the notes of the node maintenance check the
	// reaper registers on a held server's node; the reaper ends only a
	// maintenance whose notes start with it.
	HoldNotesPrefix = "orchestrate hold:"
	// ServerHeld is the state of a held server in the reaper's report.
	ServerHeld = "held"
	// ActivityHostHeld and ActivityHostReleased are the history's kinds
	// for a hold that begins and one that ends (released or expired);
	// ActivityHold is another thing (a step a safety rule holds).
	ActivityHostHeld     = "host-hold"
	ActivityHostReleased = "host-release"
)

// HoldKey is the key of host's hold record under prefix.
func HoldKey(prefix, host string) string { return ReaperKey(prefix, ReaperHoldDir+host) }

// HoldRecord is the value of <prefix>/reaper/hold/<host>.
type HoldRecord struct {
	Host string `json:"host"`
	// ID is the server's Nova ID when the writer knew it (the reaper's
	// own holds): a later server of the same name is not held by it.
	ID string `json:"id,omitempty"`
	// Role is the role the writer found the host in (shown; the reaper
	// counts a hold against the role it finds the server in itself).
	Role   string    `json:"role"`
	Reason string    `json:"reason"`
	By     string    `json:"by"`
	Time   time.Time `json:"time"`
	Until  time.Time `json:"until"`
	// Auto: the reaper took the hold for its role's hold_failures.
	Auto bool `json:"auto,omitempty"`
	// Released is when `orchestrate hold release` ended the hold, and
	// ReleasedBy who: the record stays (so hold_failures does not take
	// the same server again) until the server's records are forgotten.
	Released   time.Time `json:"released,omitzero"`
	ReleasedBy string    `json:"released_by,omitempty"`
	// Index is the record's modify index when read (not stored).
	Index uint64 `json:"-"`
}

// Active reports whether the hold stands at now: not released, not
// expired.
func (h HoldRecord) Active(now time.Time) bool {
	return h.Released.IsZero() && now.Before(h.Until)
}

// State is held, expired or released at now.
func (h HoldRecord) State(now time.Time) string {
	switch {
	case !h.Released.IsZero():
		return "released"
	case !now.Before(h.Until):
		return "expired"
	}
	return ServerHeld
}

// String is the hold on one line, for logs and status.
func (h HoldRecord) String() string {
	by := h.By
	if h.Auto {
		by = "the reaper (hold_failures)"
	}
	return fmt.Sprintf("%s held by %s until %s: %s", h.Host, by, h.Until.UTC().Format(time.RFC3339), h.Reason)
}

// Check says what is wrong with a record, or nil: a host and role name,
// a reason, an author, and an until after its time by at most MaxHoldFor.
func (h HoldRecord) Check() error {
	switch {
	case schema.ValidName("host", h.Host) != nil:
		return fmt.Errorf("host %q is not a host name", h.Host)
	case schema.ValidName("role", h.Role) != nil:
		return fmt.Errorf("role %q is not a role name", h.Role)
	case strings.TrimSpace(h.Reason) == "":
		return fmt.Errorf("no reason")
	case len(h.Reason) > MaxHoldReason:
		return fmt.Errorf("a reason of %d bytes, more than %d (it goes into the reaper's report, its history and the node's maintenance notes): name a ticket instead", len(h.Reason), MaxHoldReason)
	case strings.TrimSpace(h.By) == "":
		return fmt.Errorf("no author (by)")
	case h.Time.IsZero() || !h.Until.After(h.Time):
		return fmt.Errorf("until %s is not after time %s", h.Until.UTC().Format(time.RFC3339), h.Time.UTC().Format(time.RFC3339))
	case h.Until.Sub(h.Time) > MaxHoldFor:
		return fmt.Errorf("held for %s, more than the most a hold may last (%s)", h.Until.Sub(h.Time).Round(time.Second), MaxHoldFor)
	}
	return nil
}

// ParseHold reads the record at key rel (relative to the prefix) with
// value data. An error names what is wrong; the host is then still
// returned when the key names one, so the caller can report it.
func ParseHold(rel string, data []byte) (HoldRecord, error) {
	host := strings.TrimPrefix(rel, ReaperHoldDir)
	if schema.ValidName("host", host) != nil {
		return HoldRecord{}, fmt.Errorf("%s: not of the form %s<host>", rel, ReaperHoldDir)
	}
	var h HoldRecord
	if err := schema.StrictJSON(data, &h); err != nil {
		return HoldRecord{Host: host}, fmt.Errorf("%s: not a hold record (`orchestrate hold` writes one): %v", rel, err)
	}
	if h.Host != host {
		return HoldRecord{Host: host}, fmt.Errorf("%s: the record names host %q", rel, h.Host)
	}
	if err := h.Check(); err != nil {
		return HoldRecord{Host: host}, fmt.Errorf("%s: not a hold record (`orchestrate hold` writes one): %w", rel, err)
	}
	return h, nil
}

// MarshalHold encodes a record for its key.
func MarshalHold(h HoldRecord) []byte {
	data, _ := json.Marshal(h)
	return data
}
