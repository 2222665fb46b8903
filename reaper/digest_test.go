package reaper

import "testing"

// The boot spec's digest changes with what a server is built from, and
// only with that.
func TestBootSpecDigest(t *testing.T) {
	base := BootSpec{Flavor: "m1", Image: "debian-12", Networks: []string{"n1", "n2"}, KeyName: "ops", UserData: []byte("#!/bin/sh\n"),
		NameTemplate: "{role}{n}", Metadata: map[string]string{"team": "infra"}, Tags: []string{"a"}, SecurityGroups: []string{"default"}, AvailabilityZone: "az1"}
	d := base.Digest()
	if len(d) != 64 || d != base.Digest() {
		t.Fatalf("digest %q: want 64 hex characters, the same every time", d)
	}
	for _, tc := range []struct {
		name    string
		change  func(*BootSpec)
		differs bool
	}{
		{"image", func(b *BootSpec) { b.Image = "debian-13" }, true},
		{"flavor", func(b *BootSpec) { b.Flavor = "m2" }, true},
		{"networks", func(b *BootSpec) { b.Networks = []string{"n1"} }, true},
		{"network order (the NICs' order)", func(b *BootSpec) { b.Networks = []string{"n2", "n1"} }, true},
		{"key", func(b *BootSpec) { b.KeyName = "" }, true},
		{"user data", func(b *BootSpec) { b.UserData = []byte("#!/bin/sh\necho\n") }, true},
		{"a field's end moved into the next", func(b *BootSpec) { b.Image, b.Flavor = "debian-12m", "1" }, true},
		{"name template", func(b *BootSpec) { b.NameTemplate = "{role}-{n}" }, false},
		{"metadata", func(b *BootSpec) { b.Metadata = nil }, false},
		{"tags", func(b *BootSpec) { b.Tags = []string{"b"} }, false},
		{"security groups", func(b *BootSpec) { b.SecurityGroups = nil }, false},
		{"availability zone", func(b *BootSpec) { b.AvailabilityZone = "az2" }, false},
		{"user data file path, same content", func(b *BootSpec) { b.UserDataFile = "/elsewhere" }, false},
	} {
		b := base
		tc.change(&b)
		if got := b.Digest() != d; got != tc.differs {
			t.Errorf("%s: digest changed = %v, want %v", tc.name, got, tc.differs)
		}
	}
}
