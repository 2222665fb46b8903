package reaperkv

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// Each role's servers are created in a Nova server group of the role's
// own (its anti_affinity policy), whose ID the leader records under
// <prefix>/reaper/servergroup/<role>: a new leader reuses the group
// instead of making a second one. The record is written, under the leader
// check, before the group is created (without an ID: a group of the
// role's name may exist, made by a leader that died before it recorded
// the ID) and again with the ID once Nova made it.

// ReaperServerGroupDir holds one record per role with a server group.
const ReaperServerGroupDir = "reaper/servergroup/"

// ServerGroupKey is the key of role's server group record under prefix.
func ServerGroupKey(prefix, role string) string {
	return ReaperKey(prefix, ReaperServerGroupDir+role)
}

// ServerGroupRecord is the value of <prefix>/reaper/servergroup/<role>.
type ServerGroupRecord struct {
	Role string `json:"role"`
	// ID is the group's Nova ID; empty while its create is in flight (a
	// leader then looks for the group by Name).
	ID     string    `json:"id,omitempty"`
	Name   string    `json:"name"`
	Policy string    `json:"policy"`
	Time   time.Time `json:"time"`
	// Index is the record's modify index when read (not stored): it is
	// replaced only if it is still the one read.
	Index uint64 `json:"-"`
}

// ParseServerGroup reads the record at key rel (relative to the prefix)
// with value data. An error names what is wrong; the role is then still
// returned when the key names one, so its creates wait until the record
// is looked at (it is never overwritten: `consul kv delete` it, and the
// group is found again by its name).
func ParseServerGroup(rel string, data []byte) (ServerGroupRecord, error) {
	role := strings.TrimPrefix(rel, ReaperServerGroupDir)
	if schema.ValidName("role", role) != nil {
		return ServerGroupRecord{}, fmt.Errorf("%s: not of the form %s<role>", rel, ReaperServerGroupDir)
	}
	var r ServerGroupRecord
	if err := schema.StrictJSON(data, &r); err != nil || r.Role != role || r.Name == "" || r.Policy == "" {
		return ServerGroupRecord{Role: role}, fmt.Errorf("%s: not a server group record the reaper wrote (holds %.60q); `consul kv delete` it and the group is found again by its name", rel, data)
	}
	return r, nil
}

// MarshalServerGroup encodes a record for its key.
func MarshalServerGroup(r ServerGroupRecord) []byte {
	data, _ := json.Marshal(r)
	return data
}

// PlacementReport is a role's placement in the report.
type PlacementReport struct {
	// Zones counts the role's serving servers in each of its zones (and
	// in any other zone one is in).
	Zones map[string]int `json:"zones,omitempty"`
	// ZoneBackoff holds the zones skipped after a capacity refusal, until
	// when and why.
	ZoneBackoff map[string]RoleBackoff `json:"zone_backoff,omitempty"`
	// Group is the role's server group as recorded; GroupProblem says
	// what is wrong with it (its policy is not the configured one, its
	// record cannot be read).
	Group        *ServerGroupRecord `json:"group,omitempty"`
	GroupProblem string             `json:"group_problem,omitempty"`
}
