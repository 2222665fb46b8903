package daemon

import (
	"testing"
	"time"
)

// TestNextWake: the next cycle is the earliest of the interval's end, the
// plan's deadline and a change, never sooner than the gap after the last
// cycle began.
func TestNextWake(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const interval, gap = 30 * time.Second, 5 * time.Second
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	cases := []struct {
		name      string
		deadline  time.Time
		changed   time.Time
		want      time.Time
		wantCause string
	}{
		{name: "nothing: the interval", want: at(interval), wantCause: wakeInterval},
		{name: "a deadline before the interval", deadline: at(12 * time.Second), want: at(12 * time.Second), wantCause: wakeTimer},
		{name: "a deadline after the interval", deadline: at(time.Minute), want: at(interval), wantCause: wakeInterval},
		{name: "a deadline within the gap waits for the gap", deadline: at(time.Second), want: at(gap), wantCause: wakeTimer},
		{name: "a deadline already past waits for the gap", deadline: at(-time.Minute), want: at(gap), wantCause: wakeTimer},
		{name: "a change after the gap: at once", changed: at(8 * time.Second), want: at(8 * time.Second), wantCause: wakeChange},
		{name: "a change within the gap: at the gap", changed: at(2 * time.Second), want: at(gap), wantCause: wakeChange},
		{name: "a change before a deadline", deadline: at(20 * time.Second), changed: at(9 * time.Second), want: at(9 * time.Second), wantCause: wakeChange},
		{name: "a deadline before a change", deadline: at(7 * time.Second), changed: at(9 * time.Second), want: at(7 * time.Second), wantCause: wakeTimer},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, cause := nextWake(t0, interval, gap, tc.deadline, tc.changed)
			if !got.Equal(tc.want) || cause != tc.wantCause {
				t.Fatalf("nextWake = %s (%s), want %s (%s)", got.Sub(t0), cause, tc.want.Sub(t0), tc.wantCause)
			}
		})
	}
}
