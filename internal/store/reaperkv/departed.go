package reaperkv

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// A departed record keeps the failure-log links of a host whose records
// the reaper forgot (its server deleted): the status records that link a
// log, copied into <prefix>/reaper/departed/<host> in the transaction
// that deletes them, so `orchestrate logs HOST` still finds the log after
// the machine is gone. It is written only when at least one status record
// links a log, capped (a node writes its records' detail and log_url), and
// pruned by the reaper after departed_retention, at most MaxDeparted kept.
// Only the reaper's and the operator's tokens write under reaper/: a node
// can neither forge nor erase one.
const (
	// ReaperDepartedDir holds one record per forgotten host with a log.
	ReaperDepartedDir = "reaper/departed/"
	// MaxDepartedLogs bounds a record's entries: the newest status
	// records with a log (one per category: converge's steps and the
	// first boot's are fewer than this).
	MaxDepartedLogs = 8
	// MaxDepartedDetail and MaxDepartedURL cap an entry's detail and
	// log_url (cut, marked "..."; a URL cut that way links nothing and
	// is kept only to be shown). The leader reads every record each
	// cycle (reaper/ in one request): 1,000 records of at most
	// MaxDepartedBytes each stay a few MiB at worst.
	MaxDepartedDetail = 256
	MaxDepartedURL    = 512
	MaxDepartedBytes  = 4 << 10
	// DefaultDepartedRetention is departed_retention when the reaper's
	// configuration names none; DefaultMaxDeparted the most records kept.
	DefaultDepartedRetention = 30 * 24 * time.Hour
	DefaultMaxDeparted       = 1000
	// MaxDepartedPrunes is the most records the leader deletes a cycle.
	MaxDepartedPrunes = 16
)

// DepartedKey is the key of host's departed record under prefix.
func DepartedKey(prefix, host string) string {
	return ReaperKey(prefix, ReaperDepartedDir+host)
}

// DepartedLog is one status record that linked a log, as it stood when
// the host was forgotten.
type DepartedLog struct {
	State   string    `json:"state"`
	Version string    `json:"version"`
	Detail  string    `json:"detail,omitempty"`
	Time    time.Time `json:"time"`
	LogURL  string    `json:"log_url"`
}

// DepartedRecord is the value of <prefix>/reaper/departed/<host>.
type DepartedRecord struct {
	Host string `json:"host"`
	// Forgotten is when the reaper (or `ForgetHost`'s caller) forgot the
	// host, by its clock.
	Forgotten time.Time `json:"forgotten"`
	// Logs holds the records that linked a log, by status category.
	Logs map[string]DepartedLog `json:"logs"`
	// Index is the record's modify index when read (not stored).
	Index uint64 `json:"-"`
}

// NewDeparted builds host's record from its status records (category →
// log entry) at time forgotten: only those with a log_url, the newest
// MaxDepartedLogs, each capped, and fewer while the whole is over
// MaxDepartedBytes. ok is false when none links a log: no record.
func NewDeparted(host string, forgotten time.Time, logs map[string]DepartedLog) (rec DepartedRecord, data []byte, ok bool) {
	cats := make([]string, 0, len(logs))
	for c, l := range logs {
		if l.LogURL != "" && schema.ValidName("category", c) == nil {
			cats = append(cats, c)
		}
	}
	if len(cats) == 0 {
		return DepartedRecord{}, nil, false
	}
	sort.Slice(cats, func(i, j int) bool {
		a, b := logs[cats[i]], logs[cats[j]]
		if !a.Time.Equal(b.Time) {
			return a.Time.After(b.Time)
		}
		return cats[i] < cats[j]
	})
	rec = DepartedRecord{Host: host, Forgotten: forgotten.UTC(), Logs: map[string]DepartedLog{}}
	for _, c := range cats[:min(len(cats), MaxDepartedLogs)] {
		l := logs[c]
		l.State, l.Version = capped(l.State, 32), capped(l.Version, 128)
		l.Detail, l.LogURL = capped(l.Detail, MaxDepartedDetail), capped(l.LogURL, MaxDepartedURL)
		rec.Logs[c] = l
	}
	for n := len(rec.Logs); ; n-- {
		data, _ = json.Marshal(rec)
		if len(data) <= MaxDepartedBytes || n <= 1 {
			return rec, data, true
		}
		delete(rec.Logs, cats[n-1]) // the oldest left
	}
}

// capped is s cut to at most n bytes, marked "...", on a rune boundary.
func capped(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cut(s, len(s)-n)
}

// Check says what is wrong with a record, or nil.
func (d DepartedRecord) Check() error {
	switch {
	case schema.ValidName("host", d.Host) != nil:
		return fmt.Errorf("host %q is not a host name", d.Host)
	case d.Forgotten.IsZero():
		return fmt.Errorf("no time forgotten")
	case len(d.Logs) == 0:
		return fmt.Errorf("no logs")
	case len(d.Logs) > MaxDepartedLogs:
		return fmt.Errorf("%d logs, more than %d", len(d.Logs), MaxDepartedLogs)
	}
	for c, l := range d.Logs {
		switch {
		case schema.ValidName("category", c) != nil:
			return fmt.Errorf("%q is not a status category", c)
		case l.LogURL == "" || len(l.LogURL) > MaxDepartedURL+len("..."):
			return fmt.Errorf("%s: a log_url of %d bytes (1 to %d)", c, len(l.LogURL), MaxDepartedURL)
		case len(l.Detail) > MaxDepartedDetail+len("..."):
			return fmt.Errorf("%s: a detail of %d bytes, more than %d", c, len(l.Detail), MaxDepartedDetail)
		}
	}
	return nil
}

// ParseDeparted reads the record at key rel (relative to the prefix)
// with value data. An error names what is wrong; the host is then still
// returned when the key names one.
func ParseDeparted(rel string, data []byte) (DepartedRecord, error) {
	host := strings.TrimPrefix(rel, ReaperDepartedDir)
	if !strings.HasPrefix(rel, ReaperDepartedDir) || schema.ValidName("host", host) != nil {
		return DepartedRecord{}, fmt.Errorf("%s: not of the form %s<host>", rel, ReaperDepartedDir)
	}
	if len(data) > MaxDepartedBytes {
		return DepartedRecord{Host: host}, fmt.Errorf("%s: %d bytes, more than a departed record holds (%d)", rel, len(data), MaxDepartedBytes)
	}
	var d DepartedRecord
	if err := schema.StrictJSON(data, &d); err != nil {
		return DepartedRecord{Host: host}, fmt.Errorf("%s: not a departed record (the reaper writes one when it forgets a host): %v", rel, err)
	}
	if d.Host != host {
		return DepartedRecord{Host: host}, fmt.Errorf("%s: the record names host %q", rel, d.Host)
	}
	if err := d.Check(); err != nil {
		return DepartedRecord{Host: host}, fmt.Errorf("%s: not a departed record (the reaper writes one when it forgets a host): %w", rel, err)
	}
	return d, nil
}

// DepartedPrunes returns the hosts whose records go at now: those
// forgotten retention or longer ago, then the oldest beyond maxKeep (a
// record that cannot be read, forgotten the zero time, goes first), at
// most limit of them, oldest first.
func DepartedPrunes(forgotten map[string]time.Time, now time.Time, retention time.Duration, maxKeep, limit int) []string {
	hosts := make([]string, 0, len(forgotten))
	for h := range forgotten {
		hosts = append(hosts, h)
	}
	sort.Slice(hosts, func(i, j int) bool {
		a, b := forgotten[hosts[i]], forgotten[hosts[j]]
		if !a.Equal(b) {
			return a.Before(b)
		}
		return hosts[i] < hosts[j]
	})
	var out []string
	for i, h := range hosts {
		if len(out) >= limit {
			break
		}
		if now.Sub(forgotten[h]) >= retention || len(hosts)-i > maxKeep {
			out = append(out, h)
		}
	}
	return out
}
