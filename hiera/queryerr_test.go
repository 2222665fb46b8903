package hiera

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// On an agent with Consul's default limits, one blocking query per
// service runs into limits.http_max_conns_per_client (200) past a couple
// of hundred services. Whatever else changes, the error must say so: once
// mode exits 3 naming the limit and what to do, and --watch logs the cause
// once, never consul-template's bare "sending server error back to
// caller".
func TestAgentConnectionLimitIsNamed(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	for i := range 600 {
		register(t, a.Client, inst{node: fmt.Sprintf("n%d", i%20), nodeAddr: fmt.Sprintf("10.0.1.%d", i%20+1), svc: fmt.Sprintf("svc%03d", i), port: 8000 + i, status: "passing"})
	}
	out := outPath(t)
	code, stderr := runHS(t, a, "--out", out, "--log-level", "info")
	if code != 3 || !strings.Contains(stderr, "limits.http_max_conns_per_client") {
		t.Fatalf("once mode on a default agent with 600 services: exit %d, stderr:\n%s", code, stderr)
	}
	if n := strings.Count(stderr, "\n"); n > 3 {
		t.Fatalf("once mode logged %d lines for one cause:\n%s", n, tail(stderr, 3000))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &testutil.SyncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"--consul-addr", a.HTTPAddr, "--out", out, "--watch"}, IO{Stdout: logs, Stderr: logs})
	}()
	testutil.Eventually(t, 20*time.Second, "the refused queries logged with their cause", func() bool {
		return strings.Contains(logs.String(), "limits.http_max_conns_per_client")
	}, logs.String)
	time.Sleep(5 * time.Second) // many more refusals and retries
	cancel()
	<-done
	text := logs.String()
	if n := strings.Count(text, "consul queries failing"); n != 1 {
		t.Errorf("%d lines about the refused queries, want 1 (one cause):\n%s", n, tail(text, 3000))
	}
	if strings.Contains(text, "sending server error back to caller") {
		t.Errorf("the bare consul-template line is logged:\n%s", tail(text, 3000))
	}
	if n := strings.Count(text, "\n"); n > 20 {
		t.Errorf("%d log lines in 5 s of refusals:\n%s", n, tail(text, 3000))
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
