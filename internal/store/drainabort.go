package store

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// A drain that fails (the node answered `orchestrate drained --failed`)
// or is not answered by its deadline ends, for a scale-in or a max-age
// retirement, as its role's on_drain_failure and on_drain_timeout say:
// abort (the server stays) or delete. An aborted drain leaves a record
// under <prefix>/reaper/cooloff/<host>, written in the transaction that
// drops its journal entry, so no leader chooses the host again for a
// scale-in or a max-age retirement before the record's Until.

// ReaperCooloffDir holds one record per host whose drain was aborted.
const ReaperCooloffDir = "reaper/cooloff/"

// CooloffKey is the key of host's aborted-drain record under prefix.
func CooloffKey(prefix, host string) string { return reaperkv.ReaperKey(prefix, ReaperCooloffDir+host) }

// ParseDrainAbort reads the record at key rel (relative to the prefix)
// with value data. An error names what is wrong; the host is then still
// returned when the key names one, so the caller can keep it from being
// chosen until the record is looked at.
func ParseDrainAbort(rel string, data []byte) (reaperkv.DrainAbortRecord, error) {
	host := strings.TrimPrefix(rel, ReaperCooloffDir)
	if schema.ValidName("host", host) != nil {
		return reaperkv.DrainAbortRecord{}, fmt.Errorf("%s: not of the form %s<host>", rel, ReaperCooloffDir)
	}
	var a reaperkv.DrainAbortRecord
	if err := strictJSON(data, &a); err != nil || a.Host != host || a.Until.IsZero() {
		return reaperkv.DrainAbortRecord{Host: host}, fmt.Errorf("%s: not a record of an aborted drain the reaper wrote", rel)
	}
	return a, nil
}

// MarshalDrainAbort encodes a record for its key.
func MarshalDrainAbort(a reaperkv.DrainAbortRecord) []byte {
	data, _ := json.Marshal(a)
	return data
}
