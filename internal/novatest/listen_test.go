package novatest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNovaListensOnLoopbackOnly proves every TCP socket any process of the
// cloud listens on (each daemon's whole session, forked workers and Erlang
// children included) is bound to 127.0.0.1 or ::1, never to a wildcard or
// an external address.
func TestNovaListensOnLoopbackOnly(t *testing.T) {
	c := Start(t)
	pidFiles, err := filepath.Glob(filepath.Join(c.Dir, "run", "*.pid"))
	if err != nil || len(pidFiles) == 0 {
		t.Fatalf("no PID files in %s/run (err %v)", c.Dir, err)
	}
	sessions := map[int]string{}
	for _, f := range pidFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		sessions[pid] = strings.TrimSuffix(filepath.Base(f), ".pid")
	}

	// Socket inodes of every process in one of the daemons' sessions.
	owner := map[string]string{} // inode -> daemon
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		sid, ok := sessionOf(p)
		if !ok || sessions[sid] == "" {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join(p, "fd"))
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(p, "fd", fd.Name()))
			if err == nil && strings.HasPrefix(link, "socket:[") {
				owner[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = sessions[sid]
			}
		}
	}
	if len(owner) == 0 {
		t.Fatal("found no sockets of the cloud's processes (not root?)")
	}

	listening := 0
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		for _, l := range listeners(t, table) {
			daemon, ours := owner[l.inode]
			if !ours {
				continue
			}
			listening++
			if l.addr != "0100007F" && l.addr != "00000000000000000000000001000000" {
				t.Errorf("%s listens on %s port %d (%s): not loopback", daemon, l.addr, l.port, table)
			}
		}
	}
	// keystone, placement, glance, nova-api, neutron stand-in, rabbitmq (2), epmd.
	if listening < 8 {
		t.Errorf("found %d listening sockets of the cloud, want at least 8", listening)
	}
}

type listener struct {
	addr, inode string
	port        int
}

// listeners parses the LISTEN entries of /proc/net/tcp or tcp6.
func listeners(t *testing.T, path string) []listener {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	defer f.Close()
	var out []listener
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "0A" { // 0A: TCP_LISTEN
			continue
		}
		addr, port, ok := strings.Cut(fields[1], ":")
		if !ok {
			t.Fatalf("%s: bad local address %q", path, fields[1])
		}
		n, err := strconv.ParseInt(port, 16, 32)
		if err != nil {
			t.Fatalf("%s: bad port %q", path, port)
		}
		out = append(out, listener{addr: addr, port: int(n), inode: fields[9]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sessionOf reads a process's session ID from /proc/PID/stat.
func sessionOf(procDir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(procDir, "stat"))
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is parenthesised and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	var state string
	var ppid, pgrp, sid int
	if _, err := fmt.Sscan(string(b[i+1:]), &state, &ppid, &pgrp, &sid); err != nil {
		return 0, false
	}
	return sid, true
}
