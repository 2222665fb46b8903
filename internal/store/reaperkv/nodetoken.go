package reaperkv

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// ReaperTokenDir holds one record per server the reaper minted a Consul
// token for (node_identity): the token sealed for the reaper's key, so
// any leader can log it out before the server is deleted, or once the
// server is gone however it went. Nodes read it (the whole prefix is
// readable) and learn nothing: only the reaper's key opens it.
const ReaperTokenDir = "reaper/token/"

// NodeTokenKey is the key of host's token record.
func NodeTokenKey(prefix, host string) string { return ReaperKey(prefix, ReaperTokenDir+host) }

// NodeTokenRecord is the value of <prefix>/reaper/token/<host>.
type NodeTokenRecord struct {
	Host string `json:"host"`
	Role string `json:"role"`
	// Sealed is the token's secret encrypted for the reaper's key; never
	// the secret itself.
	Sealed string `json:"sealed"`
	// Accessor is the token's public ID, for an operator's `consul acl
	// token read`.
	Accessor string    `json:"accessor"`
	Time     time.Time `json:"time"`
}

// ParseNodeToken reads a token record at rel (relative to <prefix>/); an
// error says what is wrong with one written by hand.
func ParseNodeToken(rel string, value []byte) (NodeTokenRecord, error) {
	host := strings.TrimPrefix(rel, ReaperTokenDir)
	var rec NodeTokenRecord
	if schema.ValidName("host", host) != nil {
		return rec, fmt.Errorf("%s: not of the form %s<host>", rel, ReaperTokenDir)
	}
	if err := schema.StrictJSON(value, &rec); err != nil || rec.Host != host || rec.Sealed == "" {
		return NodeTokenRecord{Host: host}, fmt.Errorf("%s: not a token record the reaper wrote", rel)
	}
	return rec, nil
}

// Value is the record's JSON.
func (r NodeTokenRecord) Value() []byte {
	data, _ := json.Marshal(r)
	return data
}
