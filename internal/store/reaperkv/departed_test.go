package reaperkv

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The prunes: every record past the retention, then the oldest beyond
// the most kept, oldest first, at most limit a cycle; a record that
// cannot be read (the zero time) first.
func TestDepartedPrunes(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	recs := map[string]time.Time{"junk": {}}
	for i := 0; i < 10; i++ {
		recs[fmt.Sprintf("web%d", i)] = now.Add(-time.Duration(i) * 24 * time.Hour)
	}
	for _, tc := range []struct {
		retention   time.Duration
		keep, limit int
		want        string
	}{
		{30 * 24 * time.Hour, 1000, 16, "junk"},
		{7 * 24 * time.Hour, 1000, 16, "junk web9 web8 web7"},
		{7 * 24 * time.Hour, 1000, 2, "junk web9"},
		{30 * 24 * time.Hour, 5, 16, "junk web9 web8 web7 web6 web5"},
		{30 * 24 * time.Hour, 11, 16, "junk"},
	} {
		got := strings.Join(DepartedPrunes(recs, now, tc.retention, tc.keep, tc.limit), " ")
		if got != tc.want {
			t.Errorf("retention %s, keep %d, limit %d: %q, want %q", tc.retention, tc.keep, tc.limit, got, tc.want)
		}
	}
}

// A record is bounded whatever a node wrote in its status records: at
// most MaxDepartedLogs entries, each field capped, the whole at most
// MaxDepartedBytes, newest kept; and it reads back.
func TestNewDepartedBounded(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	if _, _, ok := NewDeparted("web1", now, map[string]DepartedLog{"puppet": {State: "failed"}}); ok {
		t.Fatal("a record without a log_url")
	}
	logs := map[string]DepartedLog{}
	for i := 0; i < 40; i++ {
		logs[fmt.Sprintf("step%02d", i)] = DepartedLog{State: "failed", Version: "v1", Time: now.Add(time.Duration(i) * time.Minute),
			Detail: strings.Repeat("d", 10000), LogURL: "https://swift/v1/A/c/web1/" + strings.Repeat("u", 10000)}
	}
	rec, data, ok := NewDeparted("web1", now, logs)
	if !ok || len(data) > MaxDepartedBytes || len(rec.Logs) == 0 || len(rec.Logs) > MaxDepartedLogs {
		t.Fatalf("ok %v, %d bytes, %d logs", ok, len(data), len(rec.Logs))
	}
	if _, newest := rec.Logs["step39"]; !newest {
		t.Fatalf("the newest log was dropped: %v", rec.Logs)
	}
	back, err := ParseDeparted(ReaperDepartedDir+"web1", data)
	if err != nil || len(back.Logs) != len(rec.Logs) {
		t.Fatalf("read back: %v, %d logs", err, len(back.Logs))
	}
	if _, err := ParseDeparted(ReaperDepartedDir+"../x", data); err == nil {
		t.Fatal("a key that names no host")
	}
}
