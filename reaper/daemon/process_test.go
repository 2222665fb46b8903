package daemon_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/cli"
	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// TestMain lets the test binary run as a reaper process (with a simulated
// cloud) for the process-kill test.
func TestMain(m *testing.M) {
	if os.Getenv("REAPER_TEST_CHILD") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		code := daemon.RunWithCloud(ctx, []string{"--config", os.Getenv("REAPER_TEST_CONFIG")}, cli.IO{Stdout: os.Stdout, Stderr: os.Stderr}, simcloud.New())
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// child is one reaper process.
type child struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

// Two reaper processes; the leader is killed with SIGKILL (no unlock, no
// session destroy, no deregistration): the other takes over within
// 2×TTL + lock delay + the api package's 5s lock retry.
func TestKilledLeaderProcessIsReplaced(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{HCL: agentHCL})
	c := agent.Client
	cfgPath := filepath.Join(t.TempDir(), "reaper.yaml")
	const ttl, lockDelay = 2 * time.Second, time.Second
	os.WriteFile(cfgPath, []byte(`
dry_run: false
prefix: `+prefix+`
interval: 200ms
session_ttl: 2s
lock_delay: 1s
listen: ""
roles:
  - name: web
    desired: 0
    boot: {flavor: m1, image: debian}
`), 0o600)
	children := map[string]*child{} // by "-<pid>-" as in the instance ID
	for i := 0; i < 2; i++ {
		ch := &child{cmd: exec.Command(os.Args[0], "-test.run=^$")}
		ch.cmd.Env = append(os.Environ(), "REAPER_TEST_CHILD=1", "REAPER_TEST_CONFIG="+cfgPath, "CONSUL_HTTP_ADDR="+agent.HTTPAddr)
		ch.cmd.Stdout, ch.cmd.Stderr = &ch.out, &ch.out
		if err := ch.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children["-"+strconv.Itoa(ch.cmd.Process.Pid)+"-"] = ch
		t.Cleanup(func() {
			ch.cmd.Process.Kill()
			ch.cmd.Wait()
			if t.Failed() {
				t.Logf("reaper pid %d output:\n%s", ch.cmd.Process.Pid, ch.out.String())
			}
		})
	}
	leaderOf := func() (string, *child) {
		st, err := readReport(c)
		if err != nil || st == nil || time.Since(st.Time) > time.Second {
			return "", nil
		}
		for k, ch := range children {
			if strings.Contains(st.Leader, k) {
				return st.Leader, ch
			}
		}
		return "", nil
	}
	var first string
	var leader *child
	testutil.Eventually(t, 15*time.Second, "a leader writing state", func() bool {
		first, leader = leaderOf()
		return leader != nil
	})
	// Each copy registers itself with a TTL check it refreshes every cycle;
	// the standby's may turn passing a moment after the leader's first state.
	testutil.Eventually(t, 10*time.Second, "both reapers registered and passing", func() bool {
		svcs, _, err := c.Health().Service("reaper", "", true, nil)
		return err == nil && len(svcs) == 2
	})
	killed := time.Now()
	if err := leader.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	leader.cmd.Wait()
	limit := 2*ttl + lockDelay + api.DefaultLockRetryTime + 3*time.Second
	var second string
	var next *child
	testutil.Eventually(t, limit, "the other process to lead", func() bool {
		second, next = leaderOf()
		return next != nil && second != first
	})
	t.Logf("takeover by a separate process %v after SIGKILL (bound %v)", time.Since(killed).Round(100*time.Millisecond), limit)
	// The survivor stops cleanly on SIGTERM: exit 0, service deregistered.
	next.cmd.Process.Signal(syscall.SIGTERM)
	if err := next.cmd.Wait(); err != nil {
		t.Fatalf("survivor exit: %v\n%s", err, next.out.String())
	}
	svcs, _, _ := c.Health().Service("reaper", "", false, nil)
	if len(svcs) != 1 {
		t.Fatalf("%d reaper service instances after the clean stop, want the killed one's only", len(svcs))
	}
}
