package orchestrate

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// hostDetail is `status --host H --json` (schema 1).
type hostDetail struct {
	Schema int       `json:"schema"`
	Time   time.Time `json:"time"`
	// hostReport is the host as status --json lists it.
	hostReport
	DesiredVersion string `json:"desired_version"`
	// Reaper is what the reaper's report and records say of the host,
	// one line each.
	Reaper []string `json:"reaper"`
}

// drawHost writes one host's detail; a host nothing knows is exit 2.
func drawHost(e *env, rep statusReport, in *statusInput, host string, w io.Writer, width int) error {
	d := hostDetail{Schema: statusSchema, Time: rep.Time, DesiredVersion: rep.CurrentVersion, Reaper: reaperOnHost(in, host, rep.Time),
		hostReport: hostReport{Host: host, Status: map[string]store.Status{}, Checks: []nodeCheck{}}}
	found := len(d.Reaper) > 0
	for _, h := range rep.Hosts {
		if h.Host == host {
			found = true
			d.hostReport = h
		}
	}
	if !found {
		return exitcode.Usagef("status --host %s: no such host (not in KV, the catalog, nor the reaper's report)", host)
	}
	if e.json {
		return e.withStdout(w).printJSON(d)
	}
	writeHostDetail(screen{w: w, width: width}, d)
	return nil
}

// writeHostDetail is a host's detail in text.
func writeHostDetail(s screen, d hostDetail) {
	ver := orDash(d.Version)
	if !d.OnDesired {
		ver += " (desired " + orDash(d.DesiredVersion) + ")"
	}
	where := "not in the catalog"
	if d.InCatalog {
		where = "in the catalog"
	}
	s.line(0, fmt.Sprintf("%s · role %s · version %s · %s", d.Host, orDash(d.Role), ver, where))
	for _, c := range sortedKeys(d.Status) {
		st := d.Status[c]
		state := st.State
		switch {
		case st.Corrupt:
			state += " (stored value unreadable)"
		case st.Suspect && st.State == store.StateFailed:
			state += " SUSPECT"
		}
		s.line(2, fmt.Sprintf("%s %s %s ago (%s, version %s)", c, state, age(d.Time, st.Time), st.Time.UTC().Format(time.RFC3339), orDash(st.Version)))
		if st.Detail != "" {
			s.wrap(4, 3, st.Detail)
		}
		if st.LogURL != "" {
			s.chop(4, "log "+st.LogURL)
		}
	}
	for _, c := range d.Checks {
		s.line(2, fmt.Sprintf("check %s (%s) %s", c.Name, c.ID, c.Status))
	}
	if len(d.Reaper) == 0 {
		s.line(2, "reaper: says nothing of it")
		return
	}
	s.line(2, "reaper:")
	for _, r := range d.Reaper {
		s.wrap(4, 3, r)
	}
}

// reaperOnHost is what the reaper's report and the scaling records say
// of host, one line each.
func reaperOnHost(in *statusInput, host string, now time.Time) []string {
	out := []string{}
	sc := in.snap.Scaling
	if d, ok := sc.Drains[host]; ok {
		out = append(out, "draining "+drainLine("", d, now))
	}
	if p, ok := sc.Protected[host]; ok {
		out = append(out, fmt.Sprintf("protected from scale-in by %s: %s", p.By, p.Reason))
	}
	for _, role := range sortedKeys(sc.ScaleIn) {
		if _, ok := sc.ScaleIn[role][host]; ok {
			out = append(out, "named for scale-in of "+role)
		}
	}
	st := reportState(in.reaper)
	if st == nil {
		return out
	}
	for _, r := range st.Roles {
		out = append(out, roleOnHost(r, host, now)...)
	}
	for _, j := range st.Journal {
		if j.OldName == host || j.NewName == host {
			out = append(out, "in flight: "+journalLine(j))
		}
	}
	for _, a := range st.Actions {
		if a.Host != host {
			continue
		}
		head := "next: "
		if a.Held {
			head = "held back: "
		}
		if a.Role != "" {
			head += a.Role + ": "
		}
		out = append(out, head+planText(a))
	}
	return out
}

// roleOnHost is what role r's part of the report says of host.
func roleOnHost(r reaperkv.RoleReport, host string, now time.Time) []string {
	out := []string{}
	state := ""
	for _, s := range r.Attention {
		if s.Name == host {
			state = s.State
		}
	}
	switch {
	case state != "":
		out = append(out, fmt.Sprintf("a server of role %s, %s", r.Name, state))
	case slices.Contains(r.Members, host):
		out = append(out, fmt.Sprintf("a server of role %s, healthy", r.Name))
	}
	for _, m := range r.Silent {
		if m.Host == host {
			out = append(out, fmt.Sprintf("SILENT: its records last moved %s ago (%s)", age(now, m.Since), m.Since.UTC().Format(time.RFC3339)))
		}
	}
	for _, m := range r.Orphaned {
		if m.Host == host {
			out = append(out, fmt.Sprintf("ORPHANED: records and no server since %s; removed at %s", m.Since.UTC().Format(time.RFC3339), m.Until.UTC().Format(time.RFC3339)))
		}
	}
	for _, h := range r.Held {
		if h.Host == host {
			out = append(out, "HELD for a human: "+h.String())
		}
	}
	for _, a := range r.DrainAborts {
		if a.Host == host {
			out = append(out, "drain ABORTED: "+a.String())
		}
	}
	return out
}
