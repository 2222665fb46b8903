package watch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// killGrace is how long a command has to exit after SIGTERM when its
// context ends, before SIGKILL; a Puppet run can need a few seconds to stop
// cleanly.
const killGrace = 10 * time.Second

// RunCommand runs command with /bin/sh -c, the way consul-template and
// Consul watch handlers run a command string, with the given output streams
// and environment (nil: this process's). It returns the command's exit code;
// err is set only when the command could not run at all or was stopped by
// a signal. When ctx ends the command's process group gets SIGTERM, then
// SIGKILL after a grace period.
func RunCommand(ctx context.Context, command string, stdout, stderr io.Writer, env []string) (exitCode int, err error) {
	if command == "" {
		return 0, errors.New("empty command")
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Stdout, cmd.Stderr, cmd.Env = stdout, stderr, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = killGrace
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -1, fmt.Errorf("command killed by %v", ws.Signal())
		}
		return ee.ExitCode(), nil
	default:
		return -1, fmt.Errorf("run command: %w", err)
	}
}

// ShellQuote quotes s as one word for /bin/sh: in single quotes, each
// single quote in s closing the quotes, escaped, and opening them again.
// Nothing inside is expanded.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ShellCommand joins args into a command line for /bin/sh -c that runs
// exactly args, each quoted with ShellQuote.
func ShellCommand(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = ShellQuote(a)
	}
	return strings.Join(quoted, " ")
}
