// Package labenv holds what the lab's parts share: the directory the lab
// keeps everything in ($LAB_DIR), the repository root, the Consul binary,
// the pinned nfpm command, and running a tool so that its failure names
// the command and ends with what it printed.
package labenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultDir is where the lab keeps its files when LAB_DIR is unset: the
// image cache, container roots, the apt repository and its key, logs.
const DefaultDir = "/var/tmp/orchestrate-lab"

// Module is the Go module path of the repository the lab is built from.
const Module = "github.com/jiocloud/orchestrate"

// NFPMModule is the nfpm the lab runs when NFPM is unset: the version the
// Makefile pins for `make package` (labenv_test compares them).
const NFPMModule = "github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2"

// Dir is $LAB_DIR, else DefaultDir: an absolute, clean path that is not
// the root directory and holds no character a shell or a configuration
// file would read specially.
func Dir() (string, error) {
	dir := os.Getenv("LAB_DIR")
	if dir == "" {
		return DefaultDir, nil
	}
	if err := CheckPath(dir); err != nil {
		return "", fmt.Errorf("LAB_DIR: %w", err)
	}
	return dir, nil
}

// CheckPath refuses a path the lab would write under that is relative,
// not clean, the root directory, or has a character other than letters,
// digits and "/._-+".
func CheckPath(p string) error {
	switch {
	case !filepath.IsAbs(p):
		return fmt.Errorf("%q is not an absolute path", p)
	case filepath.Clean(p) != p:
		return fmt.Errorf("%q is not a clean path (want %q)", p, filepath.Clean(p))
	case p == "/":
		return errors.New(`"/" is the root directory`)
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+", r)) {
			return fmt.Errorf("%q has the character %q (letters, digits and /._-+ only)", p, r)
		}
	}
	return nil
}

// RepoRoot is the root of the orchestrate source tree the process runs in:
// the nearest directory, from the working directory up, whose go.mod
// declares Module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			line, _, _ := bytes.Cut(b, []byte("\n"))
			if strings.TrimSpace(string(line)) == "module "+Module {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", Module)
		}
		dir = parent
	}
}

// ConsulBin is $CONSUL_BIN (the Makefile exports it), else bin/consul
// under root.
func ConsulBin(root string) string {
	if b := os.Getenv("CONSUL_BIN"); b != "" {
		return b
	}
	return filepath.Join(root, "bin", "consul")
}

// NFPM is the nfpm command as words: $NFPM split at spaces when set (the
// Makefile passes its own), else `go run NFPMModule`.
func NFPM() []string {
	if n := strings.Fields(os.Getenv("NFPM")); len(n) > 0 {
		return n
	}
	return []string{"go", "run", NFPMModule}
}

// Run runs name with args in dir (the working directory when ""), with env
// added to the process's environment. A failure names the command and
// ends with the last lines it printed.
func Run(ctx context.Context, dir string, env []string, name string, args ...string) error {
	_, err := Output(ctx, dir, env, name, args...)
	return err
}

// Output is Run returning what the command wrote to its standard output.
func Output(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w%s", name, strings.Join(args, " "), err, Tail(stderr.String()+stdout.String(), 20))
	}
	return stdout.Bytes(), nil
}

// Tail is the last n lines of out, each indented on a line of its own
// after a newline, or "" when out is empty.
func Tail(out string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 0 {
		return ""
	}
	return "\n    " + strings.Join(lines, "\n    ")
}

// RunLogged runs name with args, everything it prints going to the file
// log (replaced); a failure names the command and ends with the log's last
// lines.
func RunLogged(ctx context.Context, log string, name string, args ...string) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(log)
		return fmt.Errorf("%s %s: %w (log %s)%s", name, strings.Join(args, " "), err, log, Tail(string(b), 20))
	}
	return nil
}

// Script runs a service's script (scripts/nova/up.sh, scripts/swift/stop.sh)
// with the process's environment less every variable whose name starts
// with one of drop (the service is named by env alone, never by what the
// caller's shell had), plus env. What it prints is appended to the file
// log (mode 0600); a failure names the script and the log and ends with
// the last lines it printed.
func Script(ctx context.Context, script, log string, drop []string, env ...string) error {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, script)
	cmd.Stdout, cmd.Stderr = &out, &out
	for _, kv := range os.Environ() {
		if !slices.ContainsFunc(drop, func(p string) bool { return strings.HasPrefix(kv, p) }) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	err = cmd.Run()
	_, _ = f.Write(out.Bytes())
	if err != nil {
		rel := filepath.Join(filepath.Base(filepath.Dir(script)), filepath.Base(script))
		return fmt.Errorf("scripts/%s: %w (all of it in %s)%s", rel, err, log, Tail(out.String(), 25))
	}
	return nil
}

// ReadEnvFile reads a service script's env file: KEY=value lines, "#"
// lines being comments. A file that lacks one of need is an error naming
// it.
func ReadEnvFile(path string, need ...string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && k != "" && !strings.HasPrefix(k, "#") {
			env[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, k := range need {
		if env[k] == "" {
			return nil, fmt.Errorf("%s has no %s", path, k)
		}
	}
	return env, nil
}
