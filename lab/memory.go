//go:build lab

package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// memory is the proportional set size of each running container's
// processes (every process in its PID namespace), as "name=MiB ...", and
// the mean.
func (l *Lab) memory() string {
	var parts []string
	total, n := 0, 0
	for _, c := range l.HV.Containers() {
		if c.PID == 0 {
			continue
		}
		kib := namespacePSS(c.PID)
		if kib == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%d", c.Name, kib>>10))
		total += kib
		n++
	}
	if n == 0 {
		return ""
	}
	sort.Strings(parts)
	return fmt.Sprintf("mean %d MiB over %d (%s MiB)", total/n>>10, n, strings.Join(parts, " "))
}

// namespacePSS sums Pss of every process sharing the PID namespace of
// nspawn's child (the container's init), in KiB.
func namespacePSS(nspawn int) int {
	init := childOf(nspawn)
	if init == 0 {
		return 0
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	if err != nil {
		return 0
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	total := 0
	for _, p := range procs {
		if l, err := os.Readlink(p + "/ns/pid"); err != nil || l != ns {
			continue
		}
		data, err := os.ReadFile(p + "/smaps_rollup")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
				v, _ := strconv.Atoi(f[1])
				total += v
			}
		}
	}
	return total
}

// childOf is the first child of pid (nspawn's is the container's init).
func childOf(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}
