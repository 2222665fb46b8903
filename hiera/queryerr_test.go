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
// of hundred services. Once mode's queries do not block: it carries them
// over at most 8 connections and renders every service. --watch, which
// still holds one query per service, must say why it cannot: it logs the
// cause once, with what to do, never consul-template's bare "sending
// server error back to caller".
func TestAgentConnectionLimitIsNamed(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	for i := range 600 {
		register(t, a.Client, inst{node: fmt.Sprintf("n%d", i%20), nodeAddr: fmt.Sprintf("10.0.1.%d", i%20+1), svc: fmt.Sprintf("svc%03d", i), port: 8000 + i, status: "passing"})
	}
	out := outPath(t)
	conns := countConns(a.Ports.HTTP)
	code, stderr := runHS(t, a, "--out", out, "--log-level", "info")
	peak := conns.stop()
	if code != 0 {
		t.Fatalf("once mode on a default agent with 600 services: exit %d, stderr:\n%s", code, tail(stderr, 3000))
	}
	if keys := readKeys(t, out); keys["services::svc599::port"] == nil || keys["services::svc000::port"] == nil {
		t.Fatalf("once mode's file lacks services")
	}
	// consul-template's 6, the renderer's own client, and this test's
	// client, idle since it registered the services.
	if peak > onceConns+2 || peak == 0 {
		t.Fatalf("once mode held %d connections to the agent at once, want 1 to %d", peak, onceConns+2)
	}
	t.Logf("once mode, 600 services, default agent: at most %d connections at once", peak)

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
