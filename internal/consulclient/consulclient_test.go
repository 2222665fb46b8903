package consulclient

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/exitcode"
)

// TestOversizedTokenFile: a token file far larger than any token is a usage
// error naming the file, never its contents, and is not read whole:
// --token-file /dev/zero used to be read until the process ran out of
// memory.
func TestOversizedTokenFile(t *testing.T) {
	t.Setenv("CONSUL_HTTP_TOKEN_FILE", "")
	t.Setenv("CONSUL_HTTP_TOKEN", "")
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(strings.Repeat("s3cret", maxTokenFile/6+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Options{Addr: "127.0.0.1:8500", TokenFile: path}.Config()
	if err == nil {
		t.Fatal("an oversized token file was accepted")
	}
	if exitcode.Code(err) != exitcode.Usage {
		t.Errorf("exit code %d, want %d", exitcode.Code(err), exitcode.Usage)
	}
	if !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %q should name the file and not its contents", err)
	}
	// A real token file is fine.
	if err := os.WriteFile(path, []byte("b1gs3cret-0000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (Options{Addr: "127.0.0.1:8500", TokenFile: path}).Config(); err != nil {
		t.Fatalf("token file: %v", err)
	}
}
