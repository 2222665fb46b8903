package main

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, line, want string
		ok               bool
	}{
		{name: "plain", line: "BenchmarkPlan10k-2   	      20	  11400000 ns/op	 3560000 B/op	     954 allocs/op", want: "Plan10k: 11400000 ns/op, 3560000 B/op, 954 allocs/op", ok: true},
		{name: "sub-benchmark with own figures", line: "BenchmarkLatency/defaults-2  1  0 ns/op  840.7 median-ms  3695 p99-ms", want: "Latency/defaults: 840.7 median-ms, 3695 p99-ms", ok: true},
		{name: "not a result", line: "goos: linux", ok: false},
		{name: "pass line", line: "PASS", ok: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := parse(tc.line)
			if ok != tc.ok {
				t.Fatalf("ok = %v", ok)
			}
			if !ok {
				return
			}
			if got := r.name + ": " + strings.Join(r.figures, ", "); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
