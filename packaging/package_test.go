// Package packaging_test checks the Debian package `make package` builds with
// the real tools: dpkg-deb, lintian, dpkg (installing into a throw-away
// root), systemd-analyze and man.
package packaging_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jiocloud/orchestrate/internal/paths"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// The package's four binaries and three units.
var (
	binaries = []string{"hiera-services", "orchestrate", "reaper", "service-blocker"}
	units    = []string{paths.ReaperUnit, paths.HieraServicesUnit, paths.HieraPublisherUnit}
	// conffiles are the files an operator edits and an upgrade keeps, where
	// every other part of orchestrate looks for them (internal/paths).
	conffiles = []string{paths.Dependencies, paths.HieraPublisherEnv, paths.HieraServicesEnv, paths.ReaperEnv, paths.ReaperConfig}
)

// The control fields, the maintainer scripts and the conffiles as
// dpkg-deb --info reads them.
func TestPackageInfo(t *testing.T) {
	testutil.RequireTool(t, "dpkg-deb", "dpkg")
	pkg, _ := packages(t)
	if want := "orchestrate_" + pkg.debVersion + "_amd64.deb"; filepath.Base(pkg.path) != want {
		t.Fatalf("package file %s, want %s", filepath.Base(pkg.path), want)
	}
	deb, err := exec.Command("../scripts/version.sh", "--deb", pkg.version).Output()
	if err != nil || strings.TrimSpace(string(deb)) != pkg.debVersion {
		t.Fatalf("package version %s, want scripts/version.sh --deb %s = %s (%v)", pkg.debVersion, pkg.version, deb, err)
	}
	fields := map[string]string{}
	for _, f := range []string{"Package", "Version", "Architecture", "Depends", "Section", "Maintainer", "Description"} {
		fields[f] = strings.TrimSpace(run(t, "dpkg-deb", "--field", pkg.path, f))
	}
	for f, want := range map[string]string{
		"Package": "orchestrate", "Version": pkg.debVersion, "Architecture": "amd64", "Section": "admin",
		"Depends": "systemd | systemd-standalone-sysusers | systemd-sysusers",
	} {
		if fields[f] != want {
			t.Errorf("%s: %q, want %q", f, fields[f], want)
		}
	}
	if !strings.HasPrefix(fields["Description"], "Consul as the control plane") || !strings.Contains(fields["Description"], "installed disabled") {
		t.Errorf("Description: %q", fields["Description"])
	}
	info := run(t, "dpkg-deb", "--info", pkg.path)
	for _, script := range []string{"postinst", "prerm", "postrm"} {
		if !regexp.MustCompile(`(?m)^\s+\d+ bytes,\s+\d+ lines\s+\*\s+` + script + `\s+#!/bin/sh$`).MatchString(info) {
			t.Errorf("dpkg-deb --info shows no executable %s:\n%s", script, info)
		}
	}
	dir := t.TempDir()
	run(t, "dpkg-deb", "--control", pkg.path, dir)
	got, err := os.ReadFile(filepath.Join(dir, "conffiles"))
	if err != nil {
		t.Fatal(err)
	}
	if g := strings.Fields(string(got)); strings.Join(g, " ") != strings.Join(conffiles, " ") {
		t.Errorf("conffiles %q, want %q", g, conffiles)
	}
}

// Every file the package installs, with its mode and owner, as dpkg-deb
// --contents lists them; nothing outside the expected places.
func TestPackageContents(t *testing.T) {
	testutil.RequireTool(t, "dpkg-deb", "dpkg")
	pkg, _ := packages(t)
	want := map[string]string{} // path: mode and owner
	for _, b := range binaries {
		want[paths.BinDir+"/"+b] = "-rwxr-xr-x root/root"
		want["/usr/share/man/man1/"+b+".1.gz"] = "-rw-r--r-- root/root"
		want["/usr/share/man/man1/"+b+"-completion.1.gz"] = "-rw-r--r-- root/root"
		for _, f := range completionFiles(b) {
			want[f] = "-rw-r--r-- root/root"
		}
	}
	// One page per subcommand, git's way.
	for _, p := range []string{"orchestrate-status", "orchestrate-verify-hosts", "orchestrate-reaper", "reaper-identity"} {
		want["/usr/share/man/man1/"+p+".1.gz"] = "-rw-r--r-- root/root"
	}
	for _, u := range units {
		want[paths.UnitDir+"/"+u] = "-rw-r--r-- root/root"
	}
	for _, c := range conffiles {
		want[c] = "-rw-r--r-- root/root"
	}
	// It may hold the cloud's password; postinst gives it to the group.
	want["/etc/orchestrate/reaper.env"] = "-rw-r----- root/root"
	for _, f := range []string{
		"/usr/lib/sysusers.d/orchestrate.conf",
		"/usr/share/orchestrate/acl/node.hcl", "/usr/share/orchestrate/acl/reaper.hcl", "/usr/share/orchestrate/acl/operator.hcl",
		"/usr/share/orchestrate/acl/hook-handler.hcl", "/usr/share/orchestrate/acl/hiera-publisher.hcl",
		paths.AlertRules, paths.Dashboard,
		"/usr/share/doc/orchestrate/copyright", "/usr/share/doc/orchestrate/changelog.gz",
		"/usr/share/doc/orchestrate/README.md.gz", "/usr/share/doc/orchestrate/reaper.md.gz",
		"/usr/share/doc/orchestrate/puppet/README.md.gz",
		"/usr/share/doc/orchestrate/examples/reaper.yaml.gz", "/usr/share/doc/orchestrate/examples/user-data.yaml.gz",
		"/usr/share/doc/orchestrate/examples/clouds.yaml.gz", "/usr/share/doc/orchestrate/examples/hiera.yaml.gz", "/usr/share/doc/orchestrate/examples/dependencies.yaml.gz",
		"/usr/share/lintian/overrides/orchestrate",
	} {
		want[f] = "-rw-r--r-- root/root"
	}
	for _, f := range moduleFiles(t) {
		want[paths.PuppetModuleDir+"/"+f] = "-rw-r--r-- root/root"
	}
	for _, f := range docPages(t) {
		want[paths.DocDir+"/docs/"+f+".gz"] = "-rw-r--r-- root/root"
	}
	allowed := regexp.MustCompile(`^/(usr/bin/|usr/share/(man/man1|bash-completion/completions|zsh/vendor-completions|fish/vendor_completions\.d|doc/orchestrate|orchestrate/(acl|prometheus|grafana)|lintian/overrides|puppet/modules/orchestrate)/|usr/lib/sysusers\.d/|lib/systemd/system/|etc/orchestrate/)`)
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(run(t, "dpkg-deb", "--contents", pkg.path)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			t.Fatalf("dpkg-deb --contents line %q", sc.Text())
		}
		path := strings.TrimPrefix(f[len(f)-1], ".")
		if strings.HasPrefix(f[0], "d") {
			if f[0] != "drwxr-xr-x" || f[1] != "root/root" {
				t.Errorf("directory %s: %s %s, want drwxr-xr-x root/root", path, f[0], f[1])
			}
			continue
		}
		got[path] = f[0] + " " + f[1]
		if _, ok := want[path]; !allowed.MatchString(path) || !ok && strings.HasPrefix(path, paths.PuppetModuleDir+"/") {
			t.Errorf("unexpected file %s", path)
		}
	}
	for path, mode := range want {
		if got[path] != mode {
			t.Errorf("%s: %q, want %q", path, got[path], mode)
		}
	}
}

// lintian, Debian's package checker, finds no error. Its warnings and
// informational tags are logged.
func TestLintian(t *testing.T) {
	lintian := testutil.RequireTool(t, "lintian", "lintian")
	pkg, _ := packages(t)
	out, err := exec.Command(lintian, "--info", "--display-level", ">=pedantic", "--fail-on", "error", pkg.path).CombinedOutput()
	t.Logf("lintian:\n%s", out)
	if err != nil {
		t.Fatalf("lintian --fail-on error: %v", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "E: ") {
			t.Errorf("lintian error: %s", l)
		}
	}
}

// completionFiles are where the package puts binary's completion scripts,
// where bash-completion, zsh and fish look for them.
func completionFiles(binary string) []string {
	return []string{
		paths.BashCompletionDir + "/" + binary,
		paths.ZshCompletionDir + "/_" + binary,
		paths.FishCompletionDir + "/" + binary + ".fish",
	}
}

// The packaged binaries say the package's version and the commit; their
// man pages are every page the binary writes (help --man-dir), and each
// renders without a warning from man and has every section.
func TestPackagedBinaries(t *testing.T) {
	testutil.RequireTool(t, "dpkg-deb", "dpkg")
	man := testutil.RequireTool(t, "man", "man-db")
	pkg, _ := packages(t)
	root := extract(t, pkg.path)
	commit := strings.TrimSpace(run(t, "git", "rev-parse", "HEAD"))
	manDir := filepath.Join(root, "usr/share/man/man1")
	var pages []string
	for _, b := range binaries {
		bin := filepath.Join(root, "usr/bin", b)
		got := strings.TrimSpace(run(t, bin, "--version"))
		if want := fmt.Sprintf("%s %s (commit %s, go", b, pkg.version, commit); !strings.HasPrefix(got, want) {
			t.Errorf("%s --version = %q, want it to start %q", b, got, want)
		}
		written := t.TempDir()
		run(t, bin, "help", "--man-dir", written)
		ws, _ := filepath.Glob(filepath.Join(written, "*.1"))
		for _, w := range ws {
			pages = append(pages, filepath.Base(w)+".gz")
		}
	}
	shipped, _ := filepath.Glob(filepath.Join(manDir, "*.1.gz"))
	for i, s := range shipped {
		shipped[i] = filepath.Base(s)
	}
	sort.Strings(pages)
	if strings.Join(shipped, " ") != strings.Join(pages, " ") {
		t.Errorf("the package's man pages %v, the binaries write %v", shipped, pages)
	}
	for _, p := range shipped {
		cmd := exec.Command(man, "--warnings", "-E", "UTF-8", "-l", filepath.Join(manDir, p))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.Env = append(os.Environ(), "MANWIDTH=80")
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("man -l %s: %v\n%s", p, err, stderr.String())
		}
		for _, sec := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "EXAMPLES", "SEE ALSO"} {
			if !strings.Contains(stdout.String(), "\n"+sec+"\n") {
				t.Errorf("man page %s has no %s section", p, sec)
			}
		}
	}
}

// The packaged completion scripts are what the binaries write, and bash
// loads its script the way bash-completion does on demand: by the
// command's name, from /usr/share/bash-completion/completions.
func TestPackagedCompletion(t *testing.T) {
	testutil.RequireTool(t, "dpkg-deb", "dpkg")
	bash := testutil.RequireTool(t, "bash", "bash")
	if _, err := os.Stat("/usr/share/bash-completion/bash_completion"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no bash-completion (make test-deps installs it): %v", err)
		}
		t.Skipf("skipping: no bash-completion (make test-deps, or apt-get install bash-completion): %v", err)
	}
	pkg, _ := packages(t)
	root := extract(t, pkg.path)
	for _, b := range binaries {
		bin := filepath.Join(root, "usr/bin", b)
		for i, shell := range []string{"bash", "zsh", "fish"} {
			f := completionFiles(b)[i]
			got, err := os.ReadFile(filepath.Join(root, f))
			if err != nil {
				t.Fatal(err)
			}
			if want := run(t, bin, "completion", shell); string(got) != want {
				t.Errorf("%s is not `%s completion %s`", f, b, shell)
			}
		}
		fn := "_" + strings.ReplaceAll(b, "-", "_")
		load := "source /usr/share/bash-completion/bash_completion; __load_completion " + b + "; complete -p " + b + "; COMP_WORDS=(" + b + " --he); COMP_CWORD=1; " + fn + "; echo ${COMPREPLY[@]}"
		cmd := exec.Command(bash, "-c", load)
		cmd.Env = append(os.Environ(), "XDG_DATA_DIRS="+filepath.Join(root, "usr/share"))
		out, err := cmd.CombinedOutput()
		if want := "complete -o default -F " + fn + " " + b + "\n--help\n"; err != nil || string(out) != want {
			t.Errorf("bash-completion loading %s's script from the package: %q (%v), want %q", b, out, err, want)
		}
	}
}

// zsh and fish find the packaged scripts where Debian's zsh and fish look
// for a package's: zsh's compinit registers _orchestrate from the
// vendor-completions directory of its $fpath, fish's complete -C loads
// orchestrate.fish from vendor_completions.d.
func TestPackagedCompletionZshFish(t *testing.T) {
	testutil.RequireTool(t, "dpkg-deb", "dpkg")
	zsh := testutil.RequireTool(t, "zsh", "zsh")
	fish := testutil.RequireTool(t, "fish", "fish")
	pkg, _ := packages(t)
	root := extract(t, pkg.path)
	zdir := filepath.Join(root, "usr/share/zsh/vendor-completions")
	out, err := exec.Command(zsh, "-f", "-c", "fpath=("+zdir+" $fpath); autoload -U compinit; compinit -u -D; print $_comps[orchestrate] $_comps[service-blocker]").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "_orchestrate _service-blocker" {
		t.Errorf("zsh compinit with %s: %q (%v), want _orchestrate _service-blocker", zdir, out, err)
	}
	fdir := filepath.Join(root, "usr/share/fish/vendor_completions.d")
	// fish loads a command's completion once the command is on $PATH.
	cmd := exec.Command(fish, "--no-config", "-c", "set fish_complete_path "+fdir+" $fish_complete_path; complete -C 'orchestrate sta' | cut -f1; complete -C 'service-blocker --mode ' | cut -f1")
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(root, "usr/bin")+":"+os.Getenv("PATH"))
	out, err = cmd.CombinedOutput()
	if err != nil || string(out) != "standby\nstatus\naddressable\nfunctional\n" {
		t.Errorf("fish with %s: %q (%v)", fdir, out, err)
	}
}

// Every help of the packaged binaries, each program's and each
// subcommand's (one a man page), fits 80 and 60 columns.
func TestPackagedHelpFits(t *testing.T) {
	testutil.RequireTool(t, "dpkg-deb", "dpkg")
	pkg, _ := packages(t)
	root := extract(t, pkg.path)
	pages, _ := filepath.Glob(filepath.Join(root, "usr/share/man/man1/*.1.gz"))
	for _, p := range pages {
		page := strings.TrimSuffix(filepath.Base(p), ".1.gz")
		var bin string
		for _, b := range binaries {
			if page == b || strings.HasPrefix(page, b+"-") {
				bin = b
			}
		}
		args := []string{"--help"}
		if sub := strings.TrimPrefix(page, bin); sub != "" {
			args = []string{sub[1:], "--help"}
		}
		for _, width := range []int{80, 60} {
			cmd := exec.Command(filepath.Join(root, "usr/bin", bin), args...)
			cmd.Env = append(os.Environ(), fmt.Sprintf("COLUMNS=%d", width))
			out, err := cmd.Output()
			if err != nil || !strings.Contains(string(out), "Examples:") {
				t.Errorf("%s %v: %v\n%s", bin, args, err, out)
			}
			for _, l := range strings.Split(string(out), "\n") {
				if len([]rune(l)) > width {
					t.Errorf("%s %v at %d columns: %q", bin, args, width, l)
				}
			}
		}
	}
}

// unitRoot is a directory holding the package's files and the host's own
// systemd units (the targets the package's units name), for systemd-analyze
// --root: it checks each ExecStart binary and each Documentation= man page
// in that root.
func unitRoot(t *testing.T, deb string) string {
	t.Helper()
	root := extract(t, deb)
	hostUnits := "/lib/systemd/system"
	if _, err := os.Stat(filepath.Join(hostUnits, "multi-user.target")); err != nil {
		hostUnits = "/usr/lib/systemd/system"
	}
	// -n: the package's own units are kept.
	run(t, "cp", "-rn", hostUnits+"/.", filepath.Join(root, "lib/systemd/system"))
	return root
}

// systemd-analyze verify finds nothing to say about any unit, and each
// unit's sandbox has an exposure level of at most OK.
func TestUnits(t *testing.T) {
	sa := testutil.RequireTool(t, "systemd-analyze", "systemd")
	testutil.RequireTool(t, "man", "man-db")
	pkg, _ := packages(t)
	root := unitRoot(t, pkg.path)
	for _, u := range units {
		cmd := exec.Command(sa, "verify", "--root="+root, "/lib/systemd/system/"+u)
		// man(1) looks for the Documentation= pages in the root's man pages.
		cmd.Env = append(os.Environ(), "MANPATH="+filepath.Join(root, "usr/share/man"))
		// verify exits 0 after some complaints (a value it ignores): any
		// output is a failure.
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, out)
		}
	}
	levels := map[string]int{"PERFECT": 0, "SAFE": 1, "OK": 2, "MEDIUM": 3, "EXPOSED": 4, "UNSAFE": 5, "DANGEROUS": 6}
	for _, u := range units {
		out := run(t, sa, "security", "--offline=true", "--root="+root, u)
		m := regexp.MustCompile(`Overall exposure level for ` + regexp.QuoteMeta(u) + `: ([0-9.]+) ([A-Z]+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("systemd-analyze security %s printed no exposure level:\n%s", u, out)
		}
		score, _ := strconv.ParseFloat(m[1], 64)
		level, ok := levels[m[2]]
		t.Logf("%s: exposure %s %s", u, m[1], m[2])
		if !ok || level > levels["OK"] || score >= 5 {
			t.Errorf("%s: exposure %s %s, want at most OK:\n%s", u, m[1], m[2], out)
		}
	}
}

// dpkgRoot is a throw-away root for dpkg --root: an empty dpkg database
// whose one installed package is a stand-in for systemd, which the package
// depends on (the host provides systemd-sysusers; the scripts run without
// chroot, honouring DPKG_ROOT).
func dpkgRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	admin := filepath.Join(root, "var/lib/dpkg")
	for _, d := range []string{"info", "updates"} {
		if err := os.MkdirAll(filepath.Join(admin, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	status := "Package: systemd\nStatus: install ok installed\nPriority: important\nSection: admin\n" +
		"Maintainer: stand-in <root@localhost>\nArchitecture: amd64\nVersion: 252\nDescription: stands in for the host's systemd\n\n"
	for name, text := range map[string]string{"status": status, "available": "", "info/systemd.list": ""} {
		if err := os.WriteFile(filepath.Join(admin, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// dpkg runs dpkg on the throw-away root.
func dpkg(t *testing.T, root string, args ...string) string {
	t.Helper()
	return run(t, "dpkg", append([]string{"--root=" + root, "--force-script-chrootless"}, args...)...)
}

// files lists every path under root except dpkg's own database.
func files(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "var/lib/dpkg" {
			return filepath.SkipDir
		}
		if rel != "." {
			out = append(out, "/"+rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// dpkg -i into a throw-away root: the files, the conffiles, the user, no
// service enabled; an upgrade keeps an operator's edit of a conffile; dpkg
// --purge leaves only what policy keeps: the system user (and the lock file
// systemd-sysusers took to add it).
func TestInstallUpgradePurge(t *testing.T) {
	testutil.RequireTool(t, "dpkg", "dpkg")
	testutil.RequireTool(t, "systemd-sysusers", "systemd")
	testutil.RequireRoot(t, "dpkg -i")
	pkg, next := packages(t)
	root := dpkgRoot(t)
	before := files(t, root)

	dpkg(t, root, "-i", pkg.path)
	for _, f := range append([]string{"/usr/bin/reaper", "/usr/bin/orchestrate", "/usr/bin/hiera-services", "/usr/bin/service-blocker",
		"/lib/systemd/system/orchestrate-reaper.service", "/usr/share/orchestrate/acl/reaper.hcl"}, conffiles...) {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("installed: %v", err)
		}
	}
	admin := "--admindir=" + filepath.Join(root, "var/lib/dpkg")
	status := run(t, "dpkg-query", admin, "-W", "-f=${Status} ${Version}\n${Conffiles}\n", "orchestrate")
	if !strings.HasPrefix(status, "install ok installed "+pkg.debVersion+"\n") {
		t.Errorf("dpkg-query: %s", status)
	}
	for _, c := range conffiles {
		if !strings.Contains(status, " "+c+" ") {
			t.Errorf("%s is not a conffile:\n%s", c, status)
		}
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	// reaper.env, which may hold OS_* passwords: readable by root and the
	// group orchestrate only.
	group, err := os.ReadFile(filepath.Join(root, "etc/group"))
	if err != nil {
		t.Fatal(err)
	}
	gid := regexp.MustCompile(`(?m)^orchestrate:x:(\d+):`).FindSubmatch(group)
	fi, err := os.Stat(filepath.Join(root, "etc/orchestrate/reaper.env"))
	if err != nil || gid == nil {
		t.Fatalf("reaper.env: %v; group orchestrate: %q", err, gid)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o640 || st.Uid != 0 || fmt.Sprint(st.Gid) != string(gid[1]) {
		t.Errorf("reaper.env: mode %v owner %d:%d, want 0640 root:orchestrate (%s)", fi.Mode().Perm(), st.Uid, st.Gid, gid[1])
	}
	if !regexp.MustCompile(`(?m)^orchestrate:x:\d+:\d+:[^:]*:/var/lib/orchestrate:/usr/sbin/nologin$`).Match(passwd) {
		t.Errorf("no unprivileged user orchestrate in the root's /etc/passwd:\n%s", passwd)
	}
	for _, f := range files(t, root) {
		if strings.Contains(f, ".wants/") || strings.HasPrefix(f, "/etc/systemd") {
			t.Errorf("installing enabled a unit: %s", f)
		}
	}

	// An operator's edit survives an upgrade to a new version.
	conf := filepath.Join(root, "etc/orchestrate/reaper.yaml")
	edited, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	edited = append(edited, []byte("# edited by the operator\n")...)
	if err := os.WriteFile(conf, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	dpkg(t, root, "-i", next.path)
	if got, _ := os.ReadFile(conf); !bytes.Equal(got, edited) {
		t.Errorf("the upgrade to %s replaced the operator's reaper.yaml", next.debVersion)
	}
	if got := run(t, filepath.Join(root, "usr/bin/reaper"), "--version"); !strings.HasPrefix(got, "reaper v99.0.0 ") {
		t.Errorf("after the upgrade reaper --version = %q", got)
	}

	dpkg(t, root, "--purge", "orchestrate")
	kept := map[string]bool{"/etc": true, "/etc/passwd": true, "/etc/group": true, "/etc/shadow": true, "/etc/gshadow": true, "/etc/.pwd.lock": true}
	was := map[string]bool{}
	for _, f := range before {
		was[f] = true
	}
	for _, f := range files(t, root) {
		if !was[f] && !kept[f] {
			t.Errorf("left after dpkg --purge: %s", f)
		}
	}
	if p, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); !bytes.Contains(p, []byte("orchestrate:")) {
		t.Errorf("the purge removed the system user (policy keeps it)")
	}
}

// The maintainer scripts on a host where systemd runs: they never start or
// enable a service on install or upgrade, stop every one on removal, and clean
// up on purge. PID 1 here is not systemd, so the test gives the scripts a
// mount namespace in which /run/systemd/system exists (what they test for),
// and stand-ins on PATH for systemctl, deb-systemd-invoke,
// deb-systemd-helper and systemd-sysusers that record how they were called.
func TestMaintainerScriptsUnderSystemd(t *testing.T) {
	testutil.RequireRoot(t, "a mount namespace (unshare)")
	unshare := testutil.RequireTool(t, "unshare", "util-linux")
	pkg, _ := packages(t)
	control := t.TempDir()
	run(t, "dpkg-deb", "--control", pkg.path, control)
	stubs := t.TempDir()
	calls := filepath.Join(t.TempDir(), "calls")
	for _, name := range []string{"systemctl", "deb-systemd-invoke", "deb-systemd-helper", "systemd-sysusers"} {
		stub := "#!/bin/sh\necho \"" + name + " $*\" >>" + calls + "\n"
		if err := os.WriteFile(filepath.Join(stubs, name), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fakeRoot := t.TempDir() // DPKG_ROOT for the purge, which removes files
	if err := os.MkdirAll(filepath.Join(fakeRoot, "var/lib/orchestrate/hiera"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, script, arg string
		dpkgRoot          string
		want              []string
	}{
		{"install", "postinst", "configure", "", []string{"systemd-sysusers orchestrate.conf", "systemctl --system daemon-reload"}},
		{"upgrade: prerm", "prerm", "upgrade", "", nil},
		{"upgrade: postinst", "postinst", "configure", "", []string{"systemd-sysusers orchestrate.conf", "systemctl --system daemon-reload"}},
		{"remove: prerm", "prerm", "remove", "", []string{"deb-systemd-invoke stop orchestrate-reaper.service orchestrate-hiera-services.service orchestrate-hiera-publisher.service"}},
		{"remove: postrm", "postrm", "remove", "", []string{"systemctl --system daemon-reload"}},
		{"purge: postrm", "postrm", "purge", fakeRoot, []string{
			"deb-systemd-helper purge orchestrate-reaper.service orchestrate-hiera-services.service orchestrate-hiera-publisher.service",
			"deb-systemd-helper unmask orchestrate-reaper.service orchestrate-hiera-services.service orchestrate-hiera-publisher.service"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(calls)
			script := "mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/system && exec sh -e \"$0\" \"$1\""
			cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", script, filepath.Join(control, tc.script), tc.arg)
			cmd.Env = append(os.Environ(), "PATH="+stubs+":"+os.Getenv("PATH"), "DPKG_ROOT="+tc.dpkgRoot)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s %s: %v\n%s", tc.script, tc.arg, err, out)
			}
			got, _ := os.ReadFile(calls)
			lines := strings.Split(strings.TrimSpace(string(got)), "\n")
			if len(got) == 0 {
				lines = nil
			}
			if strings.Join(lines, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("%s %s called:\n%s\nwant:\n%s", tc.script, tc.arg, got, strings.Join(tc.want, "\n"))
			}
			for _, l := range lines {
				if regexp.MustCompile(`\b(start|restart|enable|reload-or-restart|try-restart)\b`).MatchString(l) {
					t.Errorf("%s %s started or enabled a service: %s", tc.script, tc.arg, l)
				}
			}
		})
	}
	if _, err := os.Stat(filepath.Join(fakeRoot, "var/lib/orchestrate")); !os.IsNotExist(err) {
		t.Errorf("postrm purge left DPKG_ROOT/var/lib/orchestrate: %v", err)
	}
}
