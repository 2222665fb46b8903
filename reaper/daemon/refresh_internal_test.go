package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// A spec record is a value in KV, which an operator's token can write:
// the user data file it names is read only when it is a regular file,
// holding what the record says, and no more than Nova takes.
func TestUserDataOfARecordedSpec(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "user-data-1.yaml")
	if err := os.WriteFile(good, []byte("#cloud-config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("#cloud-config\n"))
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, sha, want string
	}{
		{"the file as recorded", good, hex.EncodeToString(sum[:]), ""},
		{"the file edited since", good, strings.Repeat("0", 64), "no longer holds what the spec was built from"},
		{"no user data recorded, none now", "", func() string { s := sha256.Sum256(nil); return hex.EncodeToString(s[:]) }(), ""},
		{"gone", filepath.Join(dir, "nope"), "x", "no such file"},
		{"a FIFO (would block the cycle)", fifo, "x", "not a regular file"},
		{"a device (would fill the memory)", "/dev/zero", "x", "not a regular file"},
		{"larger than Nova takes", huge, "x", "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := userDataOf(reaperkv.BootSpecInfo{Digest: "9f86d081884c7d65", UserDataFile: tc.path, UserDataSHA256: tc.sha})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}
