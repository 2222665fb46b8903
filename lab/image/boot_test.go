package image_test

import (
	"strings"
	"testing"
)

// The image boots as a cloud machine: systemd to "running" with no failed
// unit, cloud-init's NoCloud seed applied (hostname, write_files, runcmd)
// with no module failing, Consul's unit as HashiCorp's package has it
// (the agent as consul, disabled), and Debian's puppet applying a manifest.
func TestImageBoots(t *testing.T) {
	tar := ensured(t)
	c := boot(t, tar, `#cloud-config
write_files:
  - path: /etc/lab-boot-test
    content: |
      written by cloud-init
runcmd:
  - [sh, -c, "echo ran > /var/lib/lab-boot-runcmd"]
`)
	took := c.waitBooted(t)
	t.Logf("booted and cloud-init done in %v after the veth came up", took)
	if got := strings.TrimSpace(c.must(t, "hostname")); got != c.name {
		t.Errorf("hostname %q, want the seed's local-hostname %q", got, c.name)
	}
	if got := c.must(t, "cat", "/etc/lab-boot-test", "/var/lib/lab-boot-runcmd"); got != "written by cloud-init\nran\n" {
		t.Errorf("write_files and runcmd left %q", got)
	}
	if got := c.must(t, "systemctl", "show", "consul", "-p", "User", "-p", "Group", "-p", "UnitFileState"); got != "User=consul\nGroup=consul\nUnitFileState=disabled\n" {
		t.Errorf("consul.service: %q, want consul and disabled (the user data runs it as root and enables it)", got)
	}
	if got := c.must(t, "consul", "version"); !strings.HasPrefix(got, "Consul v") {
		t.Errorf("consul version: %q", got)
	}
	if got := c.must(t, "puppet", "apply", "--color=false", "-e", "notify { 'lab': message => $facts['networking']['hostname'] }"); !strings.Contains(got, "defined 'message' as '"+c.name+"'") {
		t.Errorf("puppet apply: %s", got)
	}
	if got := c.must(t, "sh", "-c", "cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null | grep -v '^#' || true"); strings.TrimSpace(got) != "" {
		t.Errorf("apt sources in the container: %q", got)
	}
	t.Logf("booted container: %s", c.footprint(t))
}
