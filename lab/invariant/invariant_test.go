package invariant

import (
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func obs(sec int, rep *reaperkv.ReaperReport, serving map[string]bool, servers ...Server) Observation {
	return Observation{Time: t0.Add(time.Duration(sec) * time.Second), Servers: servers, Serving: serving, Report: rep}
}

func web(n string) Server { return Server{ID: "id-" + n, Name: n, Role: "web", Status: "ACTIVE"} }

var armed = &reaperkv.ReaperReport{Armed: true}

// rep is the report of a cycle started sec seconds in, listing planned.
func rep(sec int, armed, paused bool, planned ...string) *reaperkv.ReaperReport {
	return &reaperkv.ReaperReport{Time: t0.Add(time.Duration(sec) * time.Second), Armed: armed, Paused: paused, Planned: planned}
}

func draining(old string) *reaperkv.ReaperReport {
	return &reaperkv.ReaperReport{Armed: true, Journal: []reaperkv.JournalEntry{{ID: "e1", Kind: reaperkv.KindReplace, OldName: old, Phase: reaperkv.PhaseDraining}}}
}

func TestInvariants(t *testing.T) {
	all := map[string]bool{"web1": true, "web2": true, "web3": true}
	for _, tc := range []struct {
		name   string
		seq    []Observation
		expect string // a server the scenario took
		want   string // substring of the one violation; "" none
	}{
		{"a replacement: drained, then deleted", []Observation{
			obs(0, draining("web2"), all, web("web1"), web("web2"), web("web3"), web("web4")),
			obs(1, armed, map[string]bool{"web1": true, "web3": true, "web4": true}, web("web1"), web("web3"), web("web4")),
		}, "", ""},
		{"a serving server deleted with no operation", []Observation{
			obs(0, armed, all, web("web1"), web("web2"), web("web3")),
			obs(1, armed, map[string]bool{"web1": true, "web3": true}, web("web1"), web("web3")),
		}, "", "serving server web2 deleted with no reaper operation"},
		{"a delete while disarmed", []Observation{
			obs(0, &reaperkv.ReaperReport{Time: t0, Journal: draining("web2").Journal, Planned: []string{"delete web web2 (drain timeout over)"}}, all, web("web1"), web("web2"), web("web3")),
			obs(1, &reaperkv.ReaperReport{Time: t0}, map[string]bool{"web1": true, "web3": true}, web("web1"), web("web3")),
		}, "", "deleted while the reaper was disarmed"},
		{"a delete while paused", []Observation{
			obs(0, &reaperkv.ReaperReport{Time: t0, Armed: true, Paused: true, Journal: draining("web2").Journal, Planned: []string{"delete web web2 (drained)"}}, all, web("web1"), web("web2"), web("web3")),
			obs(1, armed, map[string]bool{"web1": true, "web3": true}, web("web1"), web("web3")),
		}, "", "deleted while the reaper was paused"},
		{"a rollback by the cycle that ended the pause, seen with its report", []Observation{
			obs(0, rep(0, true, true), all, web("web1"), web("web2"), web("web3"), web("web4")),
			obs(1, rep(1, true, false, "rollback web web4 (web2 is healthy again; its replacement web4 is not needed)"), all, web("web1"), web("web2"), web("web3")),
		}, "", ""},
		{"a delete seen before its cycle's report", []Observation{
			obs(0, rep(0, true, true), all, web("web1"), web("web2"), web("web3"), web("web4")),
			obs(1, rep(0, true, true), all, web("web1"), web("web2"), web("web3")),
			obs(2, rep(0, true, true), all, web("web1"), web("web2"), web("web3")),
			obs(3, rep(3, true, false, "rollback web web4 (not needed)"), all, web("web1"), web("web2"), web("web3")),
		}, "", ""},
		{"a delete Nova carried out after the next cycle paused", []Observation{
			obs(0, rep(0, true, false, "delete web web4 (drained)"), all, web("web1"), web("web2"), web("web3"), web("web4")),
			obs(5, rep(5, true, true), all, web("web1"), web("web2"), web("web3")),
		}, "", ""},
		{"a rollback listed by a paused cycle", []Observation{
			obs(0, rep(0, true, false), all, web("web1"), web("web2"), web("web3"), web("web4")),
			obs(5, rep(5, true, true, "rollback web web4 (not needed)"), all, web("web1"), web("web2"), web("web3")),
		}, "", "web4 deleted while the reaper was paused"},
		{"a delete no report accounts for, gone while paused", []Observation{
			obs(0, rep(0, true, true), all, web("web1"), web("web2"), web("web3"), web("web4")),
			obs(1, rep(0, true, true), all, web("web1"), web("web2"), web("web3")),
			obs(5, rep(5, true, false), all, web("web1"), web("web2"), web("web3")),
			obs(10, rep(10, true, false), all, web("web1"), web("web2"), web("web3")),
			obs(14, rep(10, true, false), all, web("web1"), web("web2"), web("web3")),
			obs(15, rep(15, true, false), all, web("web1"), web("web2"), web("web3")),
		}, "", "web4 deleted while the reaper was paused (no report of the 3 since listed a delete of it"},
		{"a machine the scenario killed", []Observation{
			obs(0, armed, all, web("web1"), web("web2"), web("web3")),
			obs(1, armed, map[string]bool{"web1": true, "web3": true}, web("web1"), web("web3")),
		}, "web2", ""},
		{"below min_healthy by a delete", []Observation{
			obs(0, draining("web2"), map[string]bool{"web1": true, "web2": true}, web("web1"), web("web2")),
			obs(1, armed, map[string]bool{"web1": true}, web("web1")),
		}, "", "below min_healthy 2"},
		{"two servers with one name", []Observation{
			obs(0, armed, all, web("web1"), Server{ID: "other", Name: "web1", Role: "web"}),
		}, "", "two servers named web1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(map[string]int{"web": 2})
			if tc.expect != "" {
				c.Expect(tc.expect, "powered off hard")
			}
			var got []Violation
			for _, o := range tc.seq {
				got = append(got, c.Observe(o)...)
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("violations %v, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0].What, tc.want)):
				t.Fatalf("violations %v, want one naming %q", got, tc.want)
			}
		})
	}
}

// A node's hiera data is never partial: whole YAML, not empty; a node that
// has not written it yet is fine.
func TestPartialFiles(t *testing.T) {
	c := New(nil)
	o := obs(0, armed, nil)
	o.Files = map[string]File{
		"db1":  {Exists: true, Data: []byte("\"services::db::address\": [\"198.18.1.2\"]\n")},
		"db2":  {Exists: false},
		"lb1":  {Exists: true, Data: []byte("")},
		"lb2":  {Exists: true, Data: []byte("\"services::db::address\": [\"198.18")},
		"ctl1": {Exists: true, Data: []byte("# Generated by hiera-services\n")},
	}
	got := c.Observe(o)
	if len(got) != 3 {
		t.Fatalf("violations %v, want lb1 (empty), lb2 (cut short), ctl1 (no data)", got)
	}
	for i, node := range []string{"ctl1", "lb1", "lb2"} {
		if !strings.Contains(got[i].What, node+"'s services.yaml is partial") {
			t.Errorf("violation %d: %s, want %s", i, got[i], node)
		}
	}
	if tl := c.Timeline(); len(tl) != 3 || !strings.HasPrefix(tl[0].What, "VIOLATION") {
		t.Errorf("timeline %v", tl)
	}
}
