package reaperkv

import (
	"strings"
	"testing"
	"time"
)

// ParseHold takes only a record `orchestrate hold` (or the reaper) could
// have written, and names what is wrong with any other, keeping the host
// when the key names one; a record of a hold longer than MaxHoldFor (a
// far-future until written by hand) is refused, not honoured for years.
func TestParseHold(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	good := HoldRecord{Host: "web3", Role: "web", Reason: "oops", By: "ops", Time: at, Until: at.Add(24 * time.Hour)}
	with := func(f func(*HoldRecord)) []byte { h := good; f(&h); return MarshalHold(h) }
	for _, tc := range []struct {
		name, rel string
		data      []byte
		want      string // "" when it parses
	}{
		{"good", "reaper/hold/web3", MarshalHold(good), ""},
		{"a week", "reaper/hold/web3", with(func(h *HoldRecord) { h.Until = h.Time.Add(MaxHoldFor) }), ""},
		{"garbage", "reaper/hold/web3", []byte("yes please"), "not a hold record"},
		{"empty", "reaper/hold/web3", nil, "not a hold record"},
		{"unknown field", "reaper/hold/web3", []byte(`{"host":"web3","forever":true}`), "not a hold record"},
		{"another host's", "reaper/hold/web3", with(func(h *HoldRecord) { h.Host = "web4" }), `names host "web4"`},
		{"far future", "reaper/hold/web3", with(func(h *HoldRecord) { h.Until = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC) }), "more than the most a hold may last"},
		{"until before time", "reaper/hold/web3", with(func(h *HoldRecord) { h.Until = h.Time.Add(-time.Hour) }), "is not after time"},
		{"no time", "reaper/hold/web3", with(func(h *HoldRecord) { h.Time = time.Time{} }), "is not after time"},
		{"no reason", "reaper/hold/web3", with(func(h *HoldRecord) { h.Reason = " " }), "no reason"},
		{"a long reason", "reaper/hold/web3", with(func(h *HoldRecord) { h.Reason = strings.Repeat("x", MaxHoldReason+1) }), "name a ticket instead"},
		{"no author", "reaper/hold/web3", with(func(h *HoldRecord) { h.By = "" }), "no author"},
		{"bad role", "reaper/hold/web3", with(func(h *HoldRecord) { h.Role = "../web" }), "not a role name"},
		{"no host in the key", "reaper/hold/", MarshalHold(good), "not of the form"},
		{"a deeper key", "reaper/hold/web3/x", MarshalHold(good), "not of the form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ParseHold(tc.rel, tc.data)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.want == "":
				if h.Host != "web3" || !h.Active(at) || h.Active(h.Until) || h.State(at) != ServerHeld {
					t.Fatalf("record %+v", h)
				}
			case err == nil || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %v, want %q", err, tc.want)
			case strings.HasPrefix(tc.want, "not of the form") != (h.Host == ""):
				t.Fatalf("host %q kept from key %s", h.Host, tc.rel)
			}
		})
	}
	released := good
	released.Released = at.Add(time.Hour)
	if released.Active(at.Add(2*time.Hour)) || released.State(at) != "released" || good.State(good.Until) != "expired" {
		t.Fatal("a released or expired hold is active")
	}
}
