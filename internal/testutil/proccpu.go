package testutil

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcCPUSeconds is the CPU time (user and system) process pid used so
// far, from /proc/<pid>/stat; 0 when it cannot be read (the process is
// gone). Benchmarks compare it before and after a window.
func ProcCPUSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 > len(data) {
		return 0
	}
	// Fields after the command name, which may hold spaces: state is
	// field 3, utime 14, stime 15 (in clock ticks, 100 a second).
	f := strings.Fields(string(data[i+2:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100
}
