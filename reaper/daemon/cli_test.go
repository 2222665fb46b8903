package daemon_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/cli"
	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

const cliConfig = `
interval: 200ms
session_ttl: 2s
lock_delay: 1s
listen: "127.0.0.1:0"
roles:
  - name: web
    desired: 2
    boot: {flavor: m1, image: debian}
`

func writeConfig(t *testing.T, text string) string {
	path := filepath.Join(t.TempDir(), "reaper.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunUsageErrors(t *testing.T) {
	good := writeConfig(t, cliConfig)
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{name: "no config", args: nil, want: "--config"},
		{name: "unknown flag", args: []string{"--config", good, "--bogus"}, want: "bogus"},
		{name: "extra argument", args: []string{"--config", good, "now"}, want: "unexpected arguments"},
		{name: "missing file", args: []string{"--config", "/nonexistent/reaper.yaml"}, want: "/nonexistent/reaper.yaml"},
		{name: "unknown field", args: []string{"--config", writeConfig(t, cliConfig+"colour: red\n")}, want: "colour"},
		{name: "bad flag value", args: []string{"--config", good, "--max-in-flight", "0"}, want: "max_in_flight"},
		{name: "bad interval flag", args: []string{"--config", good, "--interval", "-1s"}, want: "interval"},
		{name: "zones with the boot spec's zone", args: []string{"--config", writeConfig(t, strings.Replace(cliConfig, "boot: {flavor: m1, image: debian}",
			"availability_zones: [az1, az2]\n    boot: {flavor: m1, image: debian, availability_zone: az1}", 1)), "--check-config"},
			want: "roles[0].availability_zones: set with boot.availability_zone"},
		{name: "anti-affinity unknown", args: []string{"--config", writeConfig(t, cliConfig+"    anti_affinity: always\n"), "--check-config"},
			want: "roles[0].anti_affinity"},
		{name: "no openstack credentials", args: []string{"--config", good},
			env: map[string]string{"OS_CLOUD": "", "OS_AUTH_URL": "", "CONSUL_HTTP_ADDR": "127.0.0.1:1"}, want: "OpenStack credentials"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var out, errOut bytes.Buffer
			code := daemon.Run(context.Background(), tc.args, cli.IO{Stdout: &out, Stderr: &errOut})
			if code != 2 || !strings.Contains(errOut.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 naming %q", code, errOut.String(), tc.want)
			}
		})
	}
}

func TestRunCheckConfig(t *testing.T) {
	var out bytes.Buffer
	code := daemon.Run(context.Background(), []string{"--config", writeConfig(t, cliConfig), "--check-config"}, cli.IO{Stdout: &out, Stderr: io.Discard})
	if code != 0 || !strings.Contains(out.String(), "valid (1 roles, dry run true)") {
		t.Fatalf("exit %d, %q", code, out.String())
	}
}

// The binary's Run against a real agent: registers the service, serves
// /metrics on the registered port, stays in dry run by default, exits 0 on
// cancel.
func TestRunServesMetricsInDryRun(t *testing.T) {
	agent := consultest.Start(t, consultest.Options{HCL: agentHCL})
	sim := simcloud.New()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	var errOut bytes.Buffer
	go func() {
		done <- daemon.RunWithCloud(ctx, []string{"--config", writeConfig(t, cliConfig), "--consul-addr", agent.HTTPAddr}, cli.IO{Stdout: io.Discard, Stderr: &errOut}, sim)
	}()
	body := scrapeService(t, agent.Client, "reaper", 5*time.Second, "metrics of a cycle", func(body string) bool {
		return strings.Contains(body, "reaper_cycles_total 1") || strings.Contains(body, "reaper_cycles_total 2")
	})
	for _, want := range []string{"reaper_leader 1", "reaper_dry_run 1", `reaper_actions_total{op="create",result="dry_run"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if n := sim.Creates.Load(); n != 0 {
		t.Fatalf("dry run created %d servers", n)
	}
	svcs, _, _ := agent.Client.Catalog().Service("reaper", "", nil)
	if len(svcs) != 0 {
		t.Fatal("the service was not deregistered on exit")
	}
}

// Flags override the file; without the flag the file decides; without
// either, dry run.
func TestDryRunPrecedence(t *testing.T) {
	acting := writeConfig(t, "dry_run: false\n"+cliConfig)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"default", []string{"--config", writeConfig(t, cliConfig)}, "dry run true"},
		{"file says act", []string{"--config", acting}, "dry run false"},
		{"flag overrides the file", []string{"--config", acting, "--dry-run"}, "dry run true"},
		{"flag acts", []string{"--config", writeConfig(t, cliConfig), "--dry-run=false"}, "dry run false"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code := daemon.Run(context.Background(), append(tc.args, "--check-config"), cli.IO{Stdout: &out, Stderr: io.Discard})
			if code != 0 || !strings.Contains(out.String(), tc.want) {
				t.Fatalf("exit %d, %q; want %q", code, out.String(), tc.want)
			}
		})
	}
}
