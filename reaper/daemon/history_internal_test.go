package daemon

import "testing"

// A hold is the same hold whatever time, duration or count its line names;
func TestHoldKey(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"web.18ebe65c7c7e6be1.1: create of web7 retried after 2026-11-27T12:00:00Z (attempt 2 failed)", "web.18ebe65c7c7e6be1.1: create of web7 retried after 2026-11-27T12:00:30Z (attempt 3 failed)"},
		{"web: refresh waits at checkpoint 25% (1 of 4 serving on the spec)", "web: refresh waits at checkpoint 25% (2 of 4 serving on the spec)"},
		{"web.1.2: delete of web3 waits: Nova accepted the delete of web3 1m4s ago and still lists it", "web.1.2: delete of web3 waits: Nova accepted the delete of web3 1m34s ago and still lists it"},
	} {
		if holdKey(tc.a) != holdKey(tc.b) {
			t.Errorf("%q and %q are two holds: %q, %q", tc.a, tc.b, holdKey(tc.a), holdKey(tc.b))
		}
	}
	if holdKey("web: replacement of web2 (unhealthy) waits: paused") == holdKey("web: replacement of web3 (unhealthy) waits: paused") {
		t.Error("the holds of web2 and web3 are one: the servers a step names are part of the hold")
	}
}
