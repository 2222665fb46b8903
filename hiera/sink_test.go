package hiera

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consulclient/ctconfig"
	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/templates"
)

// memSink keeps the last data published, as a KV publisher would.
type memSink struct {
	mu        sync.Mutex
	data      []byte
	publishes int
}

var _ Sink = (*memSink)(nil)

func (s *memSink) Publish(_ context.Context, data []byte) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publishes++
	if bytes.Equal(s.data, data) {
		return false, nil
	}
	s.data = append([]byte(nil), data...)
	return true, nil
}

func (s *memSink) get() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data
}

// TestRendererSink: the renderer hands its data to the sink it is given and
// writes nothing itself; the sink's answer is what Once reports and what
// makes Watch call back. hiera-services writes exactly those bytes to --out.
func TestRendererSink(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing"})
	dir := t.TempDir()
	sink := &memSink{}
	r := &Renderer{
		Template: templates.ServicesYAML,
		Client:   a.Client,
		Consul:   ctconfig.Consul(&api.Config{Address: a.HTTPAddr}),
		Sink:     sink,
		Dest:     dir + "/not-written.yaml",
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	ctx := context.Background()
	sel, err := r.Selection(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		changed, err := r.Once(ctx, sel)
		if err != nil || changed != want {
			t.Fatalf("render %d: changed %v, err %v; want changed %v", i, changed, err, want)
		}
	}
	if !strings.Contains(string(sink.get()), `"services::mysql::address": ["10.0.0.5"]`) {
		t.Fatalf("sink holds no mysql address:\n%s", sink.get())
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("the renderer wrote %s itself", entries[0].Name())
	}
	out := outPath(t)
	if code, stderr := runHS(t, a, "--out", out); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if file, _ := os.ReadFile(out); !bytes.Equal(file, sink.get()) {
		t.Errorf("--out differs from the rendered data:\n%s\nwant:\n%s", file, sink.get())
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changedCh := make(chan struct{}, 10)
	done := make(chan error, 1)
	sink = &memSink{}
	r.Sink = sink
	go func() { done <- r.Watch(ctx, func(context.Context) { changedCh <- struct{}{} }) }()
	testutil.Eventually(t, 15*time.Second, "the first render", func() bool { return len(sink.get()) > 0 })
	waitCallback := func(what string) {
		t.Helper()
		select {
		case <-changedCh:
		case <-time.After(15 * time.Second):
			t.Fatalf("Watch did not call back after %s", what)
		}
	}
	waitCallback("the first render")
	register(t, a.Client, inst{node: "db2", nodeAddr: "10.0.0.6", svc: "mysql", port: 3306, status: "passing"})
	testutil.Eventually(t, 15*time.Second, "the new instance", func() bool {
		return strings.Contains(string(sink.get()), `"services::mysql::address": ["10.0.0.5", "10.0.0.6"]`)
	})
	waitCallback("a change")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("the renderer wrote %s itself", entries[0].Name())
	}
}
