package watch

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReadPayload(t *testing.T) {
	big := strings.Repeat("x", maxPayload+1000)
	got, err := ReadPayload(strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != maxPayload {
		t.Errorf("kept %d bytes, want %d", len(got), maxPayload)
	}
	got, err = ReadPayload(strings.NewReader(`{"mysql":[]}`))
	if err != nil || string(got) != `{"mysql":[]}` {
		t.Errorf("got %q, %v", got, err)
	}
	// A pipe is read to the end, so the writer (Consul) never sees EPIPE.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errCh := make(chan error, 1)
	go func() {
		_, err := w.Write(bytes.Repeat([]byte("y"), 1<<20))
		w.Close()
		errCh <- err
	}()
	if _, err := ReadPayload(r); err != nil {
		t.Fatal(err)
	}
	if err := <-errCh; err != nil {
		t.Errorf("writer failed: %v", err)
	}
	if got, err := ReadPayload(nil); got != nil || err != nil {
		t.Errorf("nil reader: %q, %v", got, err)
	}
}

func TestRunCommand(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code, err := RunCommand(context.Background(), "echo out; echo err >&2; exit 3", &out, &errb, nil)
	if err != nil || code != 3 {
		t.Fatalf("code %d err %v, want 3, nil", code, err)
	}
	if out.String() != "out\n" || errb.String() != "err\n" {
		t.Errorf("stdout %q stderr %q", out.String(), errb.String())
	}
	code, err = RunCommand(context.Background(), "test \"$FOO\" = bar", nil, nil, []string{"FOO=bar"})
	if err != nil || code != 0 {
		t.Errorf("env: code %d err %v", code, err)
	}
	if _, err := RunCommand(context.Background(), "", nil, nil, nil); err == nil {
		t.Error("empty command ran")
	}
	// Cancelling stops the command and its children.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	marker := filepath.Join(dir, "late")
	start := time.Now()
	// The child subshell touches the marker a second after the start
	// unless it is killed with the shell: only a signal to the whole
	// process group stops it.
	_, err = RunCommand(ctx, "(sleep 1; touch "+marker+") & wait", nil, nil, nil)
	if err == nil {
		t.Error("a cancelled command reported no error")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v", d)
	}
	// Past the child's second: had it survived, the marker is there.
	time.Sleep(time.Until(start.Add(1500 * time.Millisecond)))
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command's child kept running after cancel")
	}
}

func TestAgentConfig(t *testing.T) {
	out, err := AgentConfig([]Watch{
		{Type: "services", Args: []string{"/usr/local/bin/hiera-services", "--out", "/x"}},
		{Type: "key", Key: "orchestrate/current_version", Args: []string{"/usr/local/bin/orchestrate", "converge"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string][]map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(got["watches"]) != 2 || got["watches"][1]["key"] != "orchestrate/current_version" || got["watches"][0]["key"] != nil {
		t.Errorf("got %s", out)
	}
	for _, bad := range []Watch{
		{Type: "key", Args: []string{"/bin/true"}},
		{Type: "keyprefix", Args: []string{"/bin/true"}},
		{Type: "service", Args: []string{"/bin/true"}},
		{Type: "services"},
		{Type: "services", Args: []string{""}},
		{Type: "catalog", Args: []string{"/bin/true"}},
	} {
		if _, err := AgentConfig([]Watch{bad}); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if out, err := AgentConfig(nil); err != nil || !strings.Contains(string(out), `"watches": []`) {
		t.Errorf("no watches: %s %v", out, err)
	}
}
