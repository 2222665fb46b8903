#!/bin/sh
# customize.sh ROOT CONSUL_DEB: mmdebstrap's customize hook for the lab's
# base image (lab/image). Runs as root on the finished root filesystem
# ROOT, before mmdebstrap packs it. Makes the image an operator's cloud
# image for this lab: Consul installed from its package, cloud-init
# reading NoCloud only, no apt source.
set -eu
root=$1
deb=$2

# Consul, installed from its .deb with dpkg as an operator installs
# HashiCorp's package, so apt knows it: the user data's `packages:`
# lists consul, and apt finds it installed.
cp "$deb" "$root/tmp/consul.deb"
chroot "$root" dpkg -i /tmp/consul.deb
rm "$root/tmp/consul.deb"

# The unit runs the agent as consul, as HashiCorp's does: the user data
# (examples/user-data.yaml) runs it as root (lab/README.md, "Who runs
# Puppet").

# cloud-init: the NoCloud seed the lab hypervisor writes, nothing else
# (no metadata service to probe); the user data adds the only apt source;
# the network is the hypervisor's systemd-networkd file, not cloud-init's
# DHCP fallback. The locale is C.UTF-8, which needs no generation
# (Debian's locale-gen makes only what /etc/locale.gen lists, none here,
# and cloud-init's default en_US.UTF-8 fails its locale module).
cat >"$root/etc/cloud/cloud.cfg.d/99_orchestrate-lab.cfg" <<'CFG'
# orchestrate lab image (lab/image/customize.sh)
datasource_list: [NoCloud, None]
apt:
  preserve_sources_list: true
network:
  config: disabled
locale: C.UTF-8
CFG

# No apt source: no mirror is reachable from the lab.
: >"$root/etc/apt/sources.list"
rm -f "$root"/etc/apt/sources.list.d/*
rm -rf "$root"/var/lib/apt/lists/*

# The hypervisor gives each container its address in a systemd-networkd
# file. Puppet runs masterless (puppet apply): no agent daemon asking a
# Puppet server that does not exist.
chroot "$root" systemctl enable systemd-networkd.service
chroot "$root" systemctl disable puppet.service 2>/dev/null || true
chroot "$root" systemctl mask puppet.service

# Nothing a container does on a timer that the lab did not ask for: apt's
# daily download and upgrade (they would hold dpkg's lock when converge's
# update command needs it), and the file system timers of a disk a
# container does not have.
chroot "$root" systemctl disable apt-daily.timer apt-daily-upgrade.timer \
	fstrim.timer e2scrub_all.timer e2scrub_reap.service

# Each container gets its own hostname (cloud-init's local-hostname);
# localhost resolves from /etc/hosts; no name server (none is reachable:
# a lookup fails at once instead of timing out on the host's).
rm -f "$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
: >"$root/etc/resolv.conf"
