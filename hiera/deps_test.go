package hiera

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/consultest"
)

func TestParseDependencies(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Dependencies
		wantErr string // substring, with the line number first
	}{
		{name: "issue example", in: "mysql: {addressable: 1, functional: 2}\nkeystone: {functional: 1}\n",
			want: Dependencies{{Service: "keystone", Functional: 1}, {Service: "mysql", Addressable: 1, Functional: 2}}},
		{name: "block style", in: "rabbitmq:\n  addressable: 3\n", want: Dependencies{{Service: "rabbitmq", Addressable: 3}}},
		{name: "empty file", in: "", want: Dependencies{}},
		{name: "only a comment", in: "# nothing yet\n", want: Dependencies{}},
		{name: "empty mapping value", in: "mysql: {}\n", want: Dependencies{{Service: "mysql"}}},
		{name: "syntax error", in: "mysql: {addressable: 1\n", wantErr: "1: not valid YAML: did not find expected ',' or '}'"},
		{name: "tab indentation", in: "mysql:\n\tfunctional: 1\n", wantErr: "2: a tab indents this line"},
		{name: "misspelt key", in: "mysql: {functonal: 1}\n", wantErr: `1: service "mysql": unknown key "functonal": did you mean "functional"?`},
		{name: "not a mapping", in: "- mysql\n", wantErr: "1: want a mapping"},
		{name: "unknown key", in: "mysql: {addressable: 1}\nkeystone: {healthy: 1}\n", wantErr: `2: service "keystone": unknown key "healthy"`},
		{name: "negative", in: "mysql: {functional: -1}\n", wantErr: "1: service \"mysql\": functional: -1 is out of range"},
		{name: "not a number", in: "mysql:\n  functional: two\n", wantErr: `2: service "mysql": functional: want a whole number, got the string "two"`},
		{name: "float", in: "mysql: {functional: 1.5}\n", wantErr: "want a whole number"},
		{name: "value not a mapping", in: "mysql: 2\n", wantErr: `1: service "mysql": want {addressable: N, functional: N}`},
		{name: "bad service name", in: "\"my.sql\": {functional: 1}\n", wantErr: `1: service name "my.sql" has characters`},
		{name: "duplicate service", in: "mysql: {functional: 1}\nmysql: {functional: 2}\n", wantErr: "2: service \"mysql\" declared twice (first on line 1)"},
		{name: "duplicate count", in: "mysql: {functional: 1, functional: 2}\n", wantErr: "functional given twice"},
		{name: "a number where a mapping goes", in: "mysql: 3\n", wantErr: `1: service "mysql": want {addressable: N, functional: N}, got the number 3`},
		{name: "huge", in: "mysql: {functional: 99999999999}\n", wantErr: "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDependencies([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDependencyKeys: the counts follow the chosen semantics: addressable =
// passing + warning (what Consul DNS returns), functional = passing.
func TestDependencyKeys(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	for _, i := range []inst{
		{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", status: "passing"},
		{node: "db2", nodeAddr: "10.0.0.6", svc: "mysql", status: "warning"},
		{node: "db3", nodeAddr: "10.0.0.7", svc: "mysql", status: "critical"},
		{node: "mq1", nodeAddr: "10.0.0.8", svc: "rabbitmq", status: "passing"},
	} {
		register(t, a.Client, i)
	}
	deps := filepath.Join(t.TempDir(), "deps.yaml")
	os.WriteFile(deps, []byte("mysql: {addressable: 2, functional: 1}\nrabbitmq: {functional: 2}\nkeystone: {addressable: 1}\n"), 0o644)
	out := outPath(t)
	// --service limits the output to mysql; rabbitmq and keystone still count.
	if code, stderr := runHS(t, a, "--out", out, "--dependencies", deps, "--service", "mysql"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := readKeys(t, out)
	want := map[string]any{
		"orchestrate::dependencies::mysql::addressable_required":    2,
		"orchestrate::dependencies::mysql::addressable":             2,
		"orchestrate::dependencies::mysql::functional_required":     1,
		"orchestrate::dependencies::mysql::functional":              1,
		"orchestrate::dependencies::rabbitmq::addressable_required": 0,
		"orchestrate::dependencies::rabbitmq::addressable":          1,
		"orchestrate::dependencies::rabbitmq::functional_required":  2,
		"orchestrate::dependencies::rabbitmq::functional":           1,
		"orchestrate::dependencies::keystone::addressable_required": 1,
		"orchestrate::dependencies::keystone::addressable":          0,
		"orchestrate::dependencies::keystone::functional_required":  0,
		"orchestrate::dependencies::keystone::functional":           0,
		"orchestrate::dependencies_met":                             false,
		"orchestrate::unmet_dependencies":                           strs("keystone", "rabbitmq"),
		"services::mysql::address":                                  strs("10.0.0.5", "10.0.0.6", "10.0.0.7"),
		"services::mysql::port":                                     []any{},
		"services::mysql::nodes":                                    strs("db1", "db2", "db3"),
		"healthy_services::mysql::address":                          strs("10.0.0.5"),
		"healthy_services::mysql::port":                             []any{},
		"healthy_services::mysql::nodes":                            strs("db1"),
	}
	if !reflect.DeepEqual(got, want) {
		diffKeys(t, got, want)
	}
}

// TestBadInputWritesNothing: a malformed dependencies file, bad flags and a
// template whose output is not YAML exit 2 with a message naming the
// problem, and neither create nor change the output file.
func TestBadInputWritesNothing(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	dir := t.TempDir()
	badDeps := filepath.Join(dir, "deps.yaml")
	os.WriteFile(badDeps, []byte("mysql: {addressable: 1}\nkeystone: {functional: lots}\n"), 0o644)
	badTmpl := filepath.Join(dir, "bad.ctmpl")
	os.WriteFile(badTmpl, []byte("services: [{{ range services }}{{ .Name }}{{ end }}\n"), 0o644)
	notMap := filepath.Join(dir, "list.ctmpl")
	os.WriteFile(notMap, []byte("- {{ len services }}\n"), 0o644)
	unparsable := filepath.Join(dir, "unparsable.ctmpl")
	os.WriteFile(unparsable, []byte("{{ range services }\n"), 0o644)

	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"malformed dependencies", []string{"--dependencies", badDeps}, badDeps + `:2: service "keystone": functional: want a whole number`},
		{"missing dependencies", []string{"--dependencies", filepath.Join(dir, "nope.yaml")}, "nope.yaml: no such file"},
		{"bad regex", []string{"--service-regex", "("}, "--service-regex"},
		{"bad service", []string{"--service", "a.b"}, `--service: service name "a.b"`},
		// A name Hiera would interpolate or dig into cannot be expected.
		{"bad expected service", []string{"--expect-service", "%{lookup('secret')}"}, `--expect-service: service name`},
		{"expected service with a scope", []string{"--expect-service", "a::b"}, `--expect-service: service name "a::b"`},
		{"wait without watch", []string{"--wait", "1s:2s"}, "--wait needs --watch"},
		{"reads without exec", []string{"--reads", "mysql"}, "--reads and --reads-regex need --exec"},
		{"empty reads without exec", []string{"--reads="}, "--reads and --reads-regex need --exec"},
		{"reads a name Hiera interpolates", []string{"--exec", "true", "--reads", "%{lookup('secret')}"}, "--reads: service name"},
		{"reads a YAML mapping", []string{"--exec", "true", "--reads", "a: b"}, "--reads: service name"},
		{"reads a quoted list", []string{"--exec", "true", "--reads", `"a`}, "--reads"},
		{"bad reads regex", []string{"--exec", "true", "--reads-regex", "("}, "--reads-regex"},
		{"negative splay", []string{"--exec", "true", "--splay", "-1s"}, "--splay -1s: want 0"},
		{"huge splay", []string{"--exec", "true", "--splay", "1000000h"}, "up to 10m0s"},
		{"splay without unit", []string{"--exec", "true", "--splay", "5"}, "--splay"},
		{"NaN splay", []string{"--exec", "true", "--splay", "NaN"}, "--splay"},
		{"splay without exec", []string{"--splay", "1s"}, "--splay needs --exec"},
		{"bad wait", []string{"--watch", "--wait", "soon"}, "--wait"},
		{"positional", []string{"extra"}, `unexpected argument "extra"`},
		{"unknown flag", []string{"--nope"}, "unknown flag: --nope"},
		{"template not yaml", []string{"--template", badTmpl}, "not valid YAML"},
		{"template not a mapping", []string{"--template", notMap}, "not a YAML mapping"},
		{"template does not parse", []string{"--template", unparsable}, "template:"},
		{"missing template", []string{"--template", filepath.Join(dir, "nope.ctmpl")}, "--template"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, existing := range []bool{false, true} {
				out := outPath(t)
				if existing {
					os.MkdirAll(filepath.Dir(out), 0o755)
					os.WriteFile(out, []byte("\"old\": true\n"), 0o644)
				}
				code, stderr := runHS(t, a, append([]string{"--out", out}, tc.args...)...)
				if code != 2 {
					t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
				}
				if !strings.Contains(stderr, tc.wantErr) {
					t.Errorf("stderr does not name the problem %q:\n%s", tc.wantErr, stderr)
				}
				data, err := os.ReadFile(out)
				if existing && string(data) != "\"old\": true\n" {
					t.Errorf("existing file changed to %q", data)
				}
				if !existing && err == nil {
					t.Errorf("bad input created %s:\n%s", out, data)
				}
			}
		})
	}
}

// TestOutIsDirectory: --out naming an existing directory (no trailing
// slash) is a usage error, exit 2 naming --out, and writes nothing, not
// even the lock file beside it; it used to reach consul-template and exit 3
// as if Consul were unreachable.
func TestOutIsDirectory(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	parent := t.TempDir()
	out := filepath.Join(parent, "hiera")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	code, stderr := runHS(t, a, "--out", out)
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "--out") {
		t.Errorf("stderr does not name --out:\n%s", stderr)
	}
	for _, dir := range []string{parent, out} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != "hiera" {
				t.Errorf("bad --out created %s", filepath.Join(dir, e.Name()))
			}
		}
	}
}

// TestUnwritablePathsAreUsageErrors: an --out or --lock-file that cannot be
// created is the operator's input, exit 2 naming the flag; both used to exit
// 3, which says Consul could not be reached.
func TestUnwritablePathsAreUsageErrors(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, flag string
		args       []string
	}{
		{"out under a file", "--out", []string{"--out", filepath.Join(file, "services.yaml"), "--lock-file", filepath.Join(dir, "hs.lock")}},
		{"lock under a file", "--lock-file", []string{"--out", filepath.Join(dir, "services.yaml"), "--lock-file", filepath.Join(file, "hs.lock")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr := runHS(t, a, tc.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			if !strings.Contains(stderr, tc.flag+": ") {
				t.Errorf("error does not name %s:\n%s", tc.flag, stderr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "services.yaml")); err == nil {
		t.Error("a run with an unusable --lock-file wrote --out")
	}
}

// TestOversizedInputFiles: a dependencies file or template larger than
// maxInputFile is bad input, exit 2 naming the file, read no further. A
// character device such as /dev/zero used to be read until the process ran
// out of memory and crashed.
func TestOversizedInputFiles(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	big := filepath.Join(t.TempDir(), "big")
	// Valid YAML (comments only) and a valid template (text only), just
	// too large.
	if err := os.WriteFile(big, []byte(strings.Repeat("# padding\n", maxInputFile/10+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--dependencies", "--template"} {
		out := outPath(t)
		code, stderr := runHS(t, a, "--out", out, flag, big)
		if code != 2 {
			t.Fatalf("%s: exit %d, want 2; stderr:\n%s", flag, code, stderr)
		}
		if !strings.Contains(stderr, big) || !strings.Contains(stderr, "larger than") {
			t.Errorf("%s: error does not name the file and its size limit:\n%s", flag, stderr)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: oversized input wrote %s", flag, out)
		}
	}
}

// TestOutNotARegularFile: --out naming a FIFO or a device is exit 2 and
// leaves it alone. WriteFile used to read it (a FIFO blocks for ever,
// /dev/zero exhausts memory) and rename a regular file over it (as root,
// --out /dev/null replaced /dev/null).
func TestOutNotARegularFile(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	fifo := filepath.Join(t.TempDir(), "services.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	type res struct {
		code   int
		stderr string
	}
	done := make(chan res, 1)
	go func() {
		code, stderr := runHS(t, a, "--out", fifo, "--lock-file", fifo+".lock")
		done <- res{code, stderr}
	}()
	select {
	case r := <-done:
		if r.code != 2 || !strings.Contains(r.stderr, "--out") {
			t.Fatalf("exit %d, want 2 naming --out; stderr:\n%s", r.code, r.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("hiera-services blocked on a FIFO --out")
	}
	fi, err := os.Lstat(fifo)
	if err != nil || fi.Mode().Type() != os.ModeNamedPipe {
		t.Fatalf("the FIFO was replaced: %v %v", fi, err)
	}
}
