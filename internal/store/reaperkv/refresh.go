package reaperkv

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// An instance refresh replaces a role's servers built from another boot
// spec than the one it rolls to, in batches that keep a share of the role
// serving. A role with `refresh: auto` refreshes by itself; an operator
// starts, holds at checkpoints, continues, cancels or rolls back a refresh
// with `orchestrate refresh`, which writes the role's request under
// <prefix>/reaper/refresh/<role>. The reaper's leader writes its progress
// into the same record (compare-and-set on the index it read), and removes
// it once the refresh is done (a rollback's record stays: it pins the role
// to the spec it rolled back to).
const (
	// ReaperRefreshDir holds the refresh requests, one per role.
	ReaperRefreshDir = "reaper/refresh/"
	// ReaperSpecDir holds, per role, the boot spec the reaper builds from
	// and the one before it (what a rollback rolls back to).
	ReaperSpecDir = "reaper/spec/"
)

// RefreshKey is the key of role's refresh request.
func RefreshKey(prefix, role string) string { return ReaperKey(prefix, ReaperRefreshDir+role) }

// SpecKey is the key of role's boot spec record.
func SpecKey(prefix, role string) string { return ReaperKey(prefix, ReaperSpecDir+role) }

// Refresh states, as the reaper records them.
const (
	// RefreshRunning: batches are replaced.
	RefreshRunning = "running"
	// RefreshCheckpoint: the share of the role on the spec reached the
	// next checkpoint; no batch starts before `orchestrate refresh
	// continue`.
	RefreshCheckpoint = "checkpoint"
	// RefreshFailed: a replacement of the refresh did not serve (Nova
	// ERROR, boot_timeout, a claimed standby that did not serve); no
	// batch starts before `orchestrate refresh continue` (a retry) or a
	// new request (a rollback, say).
	RefreshFailed = "failed"
	// RefreshCancelled: an operator cancelled it; replacements in flight
	// finish, no new one starts, `refresh: auto` included, until a new
	// request.
	RefreshCancelled = "cancelled"
	// RefreshPinned: a rollback is done; its record stays, and holds the
	// role on the spec it rolled back to until a new request (or the
	// configuration names that spec again).
	RefreshPinned = "pinned"
)

// MaxCheckpoints bounds a refresh's checkpoints.
const MaxCheckpoints = 10

// RefreshRecord is the value of <prefix>/reaper/refresh/<role>.
type RefreshRecord struct {
	// Time, By and Reason: the request, as `orchestrate refresh` wrote it.
	Time   time.Time `json:"time"`
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	// MinHealthyPercent, when not 0, replaces the role's
	// refresh_min_healthy_percent for this refresh.
	MinHealthyPercent int `json:"min_healthy_percent,omitempty"`
	// Checkpoints are shares of the role's desired count, in percent,
	// ascending: when that share of the role serves on the spec, the
	// refresh waits for `orchestrate refresh continue`.
	Checkpoints []int `json:"checkpoints,omitempty"`
	// Continued counts the checkpoints passed by `refresh continue`;
	// Retries the failures it answered (the refresh goes on while
	// Retries is Failures).
	Continued int `json:"continued,omitempty"`
	Retries   int `json:"retries,omitempty"`
	// Rollback: the refresh rolls the role back to the spec before the
	// current one (the spec record's previous).
	Rollback bool `json:"rollback,omitempty"`
	// Cancelled is when an operator cancelled it.
	Cancelled time.Time `json:"cancelled,omitzero"`

	// Written by the reaper. Seen is when its leader first read the
	// request; Spec the digest the refresh rolls to (a rollback's is
	// fixed when it is seen; a refresh's is the configuration's);
	// State and Detail where it stands; Failures counts failed
	// replacements (each stops it until continued).
	Seen     time.Time `json:"seen,omitzero"`
	Spec     string    `json:"spec,omitempty"`
	State    string    `json:"state,omitempty"`
	Detail   string    `json:"detail,omitempty"`
	Updated  time.Time `json:"updated,omitzero"`
	Failures int       `json:"failures,omitempty"`

	// Index is the key's modify index, as read (not stored): every
	// write back is a compare-and-set on it.
	Index uint64 `json:"-"`
}

// Value is the record's JSON.
func (r RefreshRecord) Value() []byte {
	data, _ := json.Marshal(r)
	return data
}

// Check says what is wrong with a request, or nil: its time, its
// percentage and its checkpoints.
func (r RefreshRecord) Check() error {
	switch {
	case r.Time.IsZero():
		return fmt.Errorf("no time")
	case r.MinHealthyPercent < 0 || r.MinHealthyPercent > 100:
		return fmt.Errorf("min_healthy_percent %d is not between 0 and 100", r.MinHealthyPercent)
	case len(r.Checkpoints) > MaxCheckpoints:
		return fmt.Errorf("%d checkpoints: at most %d", len(r.Checkpoints), MaxCheckpoints)
	case r.Continued < 0 || r.Continued > len(r.Checkpoints):
		return fmt.Errorf("continued %d is not a count of its %d checkpoints", r.Continued, len(r.Checkpoints))
	case r.Failures < 0 || r.Retries < 0 || r.Retries > r.Failures:
		return fmt.Errorf("retries %d of failures %d", r.Retries, r.Failures)
	}
	for i, c := range r.Checkpoints {
		if c < 1 || c > 99 {
			return fmt.Errorf("checkpoint %d%% is not between 1 and 99", c)
		}
		if i > 0 && c <= r.Checkpoints[i-1] {
			return fmt.Errorf("checkpoints %v are not in ascending order", r.Checkpoints)
		}
	}
	if !slices.Contains([]string{"", RefreshRunning, RefreshCheckpoint, RefreshFailed, RefreshCancelled, RefreshPinned}, r.State) {
		return fmt.Errorf("unknown state %q", r.State)
	}
	return nil
}

// ParseRefresh reads role's request at rel (relative to <prefix>/); an
// error says what is wrong with one written by hand.
func ParseRefresh(rel string, value []byte, index uint64) (role string, rec RefreshRecord, err error) {
	role = strings.TrimPrefix(rel, ReaperRefreshDir)
	if schema.ValidName("role", role) != nil {
		return "", rec, fmt.Errorf("%s: not of the form %s<role>", rel, ReaperRefreshDir)
	}
	if err := schema.StrictJSON(value, &rec); err != nil {
		return role, RefreshRecord{}, fmt.Errorf("%s: not a refresh request (want the JSON `orchestrate refresh` writes): %v", rel, err)
	}
	if err := rec.Check(); err != nil {
		return role, RefreshRecord{}, fmt.Errorf("%s: not a refresh request: %v", rel, err)
	}
	rec.Index = index
	return role, rec, nil
}

// SpecRecord is the value of <prefix>/reaper/spec/<role>: the boot spec
// the role's servers are built from, and the one before it. It holds what
// a server is built from but never the user data itself (every node reads
// the prefix): only its file's path and SHA-256, so a rollback builds from
// the previous spec only while that file still holds what it held.
type SpecRecord struct {
	Current  BootSpecInfo  `json:"current"`
	Previous *BootSpecInfo `json:"previous,omitempty"`
}

// BootSpecInfo is one boot spec as recorded.
type BootSpecInfo struct {
	Digest         string    `json:"digest"`
	Image          string    `json:"image"`
	Flavor         string    `json:"flavor"`
	Networks       []string  `json:"networks,omitempty"`
	KeyName        string    `json:"key_name,omitempty"`
	UserDataFile   string    `json:"user_data_file,omitempty"`
	UserDataSHA256 string    `json:"user_data_sha256,omitempty"`
	Since          time.Time `json:"since"`
}

// Value is the record's JSON.
func (r SpecRecord) Value() []byte {
	data, _ := json.Marshal(r)
	return data
}

// ParseSpec reads role's spec record at rel.
func ParseSpec(rel string, value []byte) (role string, rec SpecRecord, err error) {
	role = strings.TrimPrefix(rel, ReaperSpecDir)
	if schema.ValidName("role", role) != nil {
		return "", rec, fmt.Errorf("%s: not of the form %s<role>", rel, ReaperSpecDir)
	}
	if err := schema.StrictJSON(value, &rec); err != nil || rec.Current.Digest == "" || (rec.Previous != nil && rec.Previous.Digest == "") {
		return role, SpecRecord{}, fmt.Errorf("%s: not a boot spec record the reaper wrote", rel)
	}
	return role, rec, nil
}
