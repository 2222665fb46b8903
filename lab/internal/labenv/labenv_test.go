package labenv

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The nfpm the lab runs is the one the Makefile pins for make package.
func TestNFPMIsTheMakefilesPin(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^NFPM \?= \$\(GO\) run (\S+)$`).FindSubmatch(b)
	if m == nil || string(m[1]) != NFPMModule {
		t.Errorf("Makefile pins nfpm as %q, labenv.NFPMModule is %q", m, NFPMModule)
	}
	t.Setenv("NFPM", "")
	if got := strings.Join(NFPM(), " "); got != "go run "+NFPMModule {
		t.Errorf("NFPM() = %q", got)
	}
	t.Setenv("NFPM", "/usr/bin/go run x@v1")
	if got := strings.Join(NFPM(), "|"); got != "/usr/bin/go|run|x@v1" {
		t.Errorf("NFPM() with $NFPM = %q", got)
	}
}

// LAB_DIR defaults to DefaultDir; a value the lab would misuse is refused
// naming it.
func TestDir(t *testing.T) {
	t.Setenv("LAB_DIR", "")
	if d, err := Dir(); err != nil || d != DefaultDir {
		t.Errorf("Dir() = %q, %v", d, err)
	}
	for _, tc := range []struct{ dir, want string }{
		{"/srv/lab", ""},
		{"lab", "not an absolute path"},
		{"/", "root directory"},
		{"/srv/../lab", "not a clean path"},
		{"/srv/lab/", "not a clean path"},
		{"/srv/la b", `character ' '`},
		{"/srv/lab,upperdir=/x", `character ','`},
		{"/srv/lab:x", `character ':'`},
		{"/srv/lab\n", `character '\n'`},
		{"/srv/$(reboot)", `character '$'`},
	} {
		t.Setenv("LAB_DIR", tc.dir)
		d, err := Dir()
		switch {
		case tc.want == "" && (err != nil || d != tc.dir):
			t.Errorf("LAB_DIR=%q: %q, %v", tc.dir, d, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "LAB_DIR: ")):
			t.Errorf("LAB_DIR=%q: %v, want an error with %q", tc.dir, err, tc.want)
		}
	}
}

// A failed command's error names it and ends with what it printed.
func TestRunNamesTheCommand(t *testing.T) {
	err := Run(context.Background(), "", nil, "sh", "-c", "echo one; echo two >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "sh -c echo one") || !strings.Contains(err.Error(), "exit status 3") || !strings.HasSuffix(err.Error(), "\n    two\n    one") {
		t.Errorf("Run: %v", err)
	}
	if out, err := Output(context.Background(), "", []string{"LABENV_X=y"}, "sh", "-c", "echo $LABENV_X"); err != nil || string(out) != "y\n" {
		t.Errorf("Output: %q %v", out, err)
	}
	if got := Tail(strings.Repeat("x\n", 50)+"last\n", 3); got != "\n    x\n    x\n    last" {
		t.Errorf("Tail: %q", got)
	}
}

// A second Lock waits for the first to end, and gives up with its
// context.
func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlock, err := Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, path); err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Errorf("a second Lock while held: %v", err)
	}
	unlock()
	u2, err := Lock(context.Background(), path)
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	u2()
}

// Script gives the script the caller's environment less the dropped
// prefixes, plus its own; appends what it printed to the log; and a
// failure names the script and the log and ends with its output.
func TestScript(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "svc", "up.sh")
	if err := os.MkdirAll(filepath.Dir(script), 0o755); err != nil {
		t.Fatal(err)
	}
	body := "#!/bin/sh\necho \"mine=$SVC_MINE theirs=${SVC_THEIRS:-unset} other=$LABENV_OTHER\"\n[ -z \"$FAIL\" ] || { echo failing on purpose; exit 3; }\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "up.log")
	t.Setenv("SVC_THEIRS", "caller")
	t.Setenv("LABENV_OTHER", "kept")
	if err := Script(context.Background(), script, log, []string{"SVC_"}, "SVC_MINE=1"); err != nil {
		t.Fatal(err)
	}
	err := Script(context.Background(), script, log, []string{"SVC_"}, "SVC_MINE=2", "FAIL=1")
	if err == nil || !strings.Contains(err.Error(), "scripts/svc/up.sh") || !strings.Contains(err.Error(), log) || !strings.HasSuffix(err.Error(), "failing on purpose") {
		t.Fatalf("failing script: %v", err)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if want := "mine=1 theirs=unset other=kept\nmine=2 theirs=unset other=kept\nfailing on purpose\n"; string(b) != want {
		t.Fatalf("log %q, want %q", b, want)
	}
}

// ReadEnvFile takes KEY=value lines, skips comments, and names a missing
// key.
func TestReadEnvFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "env")
	if err := os.WriteFile(path, []byte("# comment=x\nA=1\nB=x=y\nnot a pair\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env, err := ReadEnvFile(path, "A", "B")
	if err != nil || len(env) != 2 || env["A"] != "1" || env["B"] != "x=y" {
		t.Fatalf("env %v, %v", env, err)
	}
	if _, err := ReadEnvFile(path, "A", "C"); err == nil || !strings.Contains(err.Error(), "has no C") {
		t.Fatalf("missing key: %v", err)
	}
}
