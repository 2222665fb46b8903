package store

import (
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

func TestValidName(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{name: "plain", in: "h1"},
		{name: "dotted version", in: "v2.0.1-20261122"},
		{name: "unicode", in: "nœud-é"},
		{name: "empty", in: "", wantErr: "is empty"},
		{name: "slash", in: "a/b", wantErr: "contains a slash"},
		{name: "dot", in: ".", wantErr: "is not a name"},
		{name: "dotdot", in: "..", wantErr: "is not a name"},
		{name: "space", in: "a b", wantErr: "white space"},
		{name: "newline", in: "a\nb", wantErr: "white space"},
		{name: "control", in: "a\x01b", wantErr: "control"},
		{name: "invalid utf8", in: "a\xffb", wantErr: "UTF-8"},
		{name: "too long", in: strings.Repeat("x", schema.MaxNameLen+1), wantErr: "longer than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := schema.ValidName("host", tc.in)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidName(%q) = %v, want nil", tc.in, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ValidName(%q) = %v, want error containing %q", tc.in, err, tc.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "host") {
				t.Errorf("error %q does not name the kind", err)
			}
		})
	}
}

func TestValidPrefix(t *testing.T) {
	for _, ok := range []string{"orchestrate", "clouds/prod/orchestrate"} {
		if err := schema.ValidPrefix(ok); err != nil {
			t.Errorf("ValidPrefix(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a//b", "a b", "a/../b"} {
		if err := schema.ValidPrefix(bad); err == nil {
			t.Errorf("ValidPrefix(%q) = nil, want error", bad)
		}
	}
}
