package logship

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CurrentGrant takes a grant renewed in KV over the file's only when it is
// readable, for this host and later; it keeps it in the file; a KV that
// fails leaves the file's.
func TestCurrentGrant(t *testing.T) {
	const url = "http://127.0.0.1:1/v1/AUTH_a/logs"
	now := time.Now()
	sign := func(host string, exp time.Time) (Grant, []byte) {
		g, err := SignGrant([]byte("k"), url, host, exp)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(g)
		return g, b
	}
	fileG, _ := sign("web1", now.Add(time.Hour))
	_, older := sign("web1", now.Add(time.Minute))
	_, other := sign("web2", now.Add(2*time.Hour))
	newG, newer := sign("web1", now.Add(2*time.Hour))
	for _, tc := range []struct {
		name    string
		kv      []byte
		kvErr   error
		noFile  bool
		want    Grant
		wantErr error
		logs    string
	}{
		{name: "nothing in KV", want: fileG},
		{name: "KV down", kvErr: errors.New("connection refused"), want: fileG},
		{name: "garbage by hand", kv: []byte(`{"signature": "x"`), want: fileG, logs: "unreadable"},
		{name: "another host's", kv: other, want: fileG, logs: "for another host"},
		{name: "older", kv: older, want: fileG},
		{name: "newer", kv: newer, want: newG, logs: "log grant renewed"},
		{name: "no file, nothing in KV", noFile: true, wantErr: ErrNoGrant},
		{name: "no file, one in KV", noFile: true, kv: newer, want: newG},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log-grant.json")
			if !tc.noFile {
				if err := WriteGrant(path, fileG); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			g, err := CurrentGrant(context.Background(), path, "web1", func(context.Context) ([]byte, error) { return tc.kv, tc.kvErr },
				slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
			switch {
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			case tc.wantErr == nil && (err != nil || g != tc.want):
				t.Fatalf("got %v %v, want %v", g, err, tc.want)
			case tc.logs != "" && !strings.Contains(logs.String(), tc.logs):
				t.Fatalf("logs %q, want %q", logs.String(), tc.logs)
			case strings.Contains(logs.String(), fileG.Signature) || strings.Contains(logs.String(), newG.Signature):
				t.Fatalf("a log line shows a signature: %s", logs.String())
			}
			if tc.wantErr == nil {
				if back, err := LoadGrant(path); err != nil || back != tc.want {
					t.Fatalf("file after: %v %v, want %v", back, err, tc.want)
				}
			}
		})
	}
}
