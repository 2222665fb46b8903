package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version and commit are stamped at build time by the Makefile (`make
// build`, `make package`):
//
//	go build -ldflags "-X github.com/jiocloud/orchestrate/internal/cli.version=$(git describe ...) \
//	                   -X github.com/jiocloud/orchestrate/internal/cli.commit=$(git rev-parse HEAD)"
//
// A plain `go build` leaves them empty; Build then falls back to what the Go
// toolchain recorded, else "dev" and "unknown".
var (
	version string
	commit  string
)

// BuildInfo says which build of orchestrate a binary is.
type BuildInfo struct {
	// Version is `git describe` of the source at build time (v1.2.3,
	// v1.2.3-4-gabcdef0, with -dirty for uncommitted changes), the module
	// version for `go install ...@v1.2.3`, else "dev".
	Version string
	// Commit is the full commit hash, else "unknown".
	Commit string
	// GoVersion is the Go release the binary was built with.
	GoVersion string
}

// Build returns this binary's build information.
func Build() BuildInfo {
	b := BuildInfo{Version: version, Commit: commit, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && b.Commit == "" {
				b.Commit = s.Value
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

// String is the one line `--version` prints after the program's name.
func (b BuildInfo) String() string {
	return fmt.Sprintf("%s (commit %s, %s %s/%s)", b.Version, b.Commit, b.GoVersion, runtime.GOOS, runtime.GOARCH)
}

// VersionFlag is the argument every binary answers with its version.
const VersionFlag = "--version"

// PrintVersion writes `NAME VERSION (commit C, go1.x os/arch)` to w.
func PrintVersion(w io.Writer, name string) {
	fmt.Fprintf(w, "%s %s\n", name, Build())
}
