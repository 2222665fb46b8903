package watch

import (
	"reflect"
	"testing"
)

func TestChildEnv(t *testing.T) {
	env := []string{
		"PATH=/usr/bin", "CONSUL_HTTP_TOKEN=s3cret", "CONSUL_HTTP_TOKEN_FILE=/etc/t", "CONSUL_HTTP_ADDR=127.0.0.1:8500",
		"OS_PASSWORD=pw", "OS_CLOUD=prod", "HOME=/root", "OSX=keep", "=odd",
	}
	got := ChildEnv(env, nil)
	want := []string{"PATH=/usr/bin", "CONSUL_HTTP_ADDR=127.0.0.1:8500", "HOME=/root", "OSX=keep", "=odd"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ChildEnv(no pass) = %q, want %q", got, want)
	}
	got = ChildEnv(env, []string{"OS_CLOUD", "CONSUL_HTTP_TOKEN_FILE"})
	want = []string{"PATH=/usr/bin", "CONSUL_HTTP_TOKEN_FILE=/etc/t", "CONSUL_HTTP_ADDR=127.0.0.1:8500", "OS_CLOUD=prod", "HOME=/root", "OSX=keep", "=odd"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ChildEnv(pass) = %q, want %q", got, want)
	}
}

func TestValidPassEnv(t *testing.T) {
	if err := ValidPassEnv([]string{"OS_CLOUD", "_x", "A1"}); err != nil {
		t.Errorf("valid names refused: %v", err)
	}
	for _, bad := range []string{"", "1A", "A=B", "A B", "Ä"} {
		if err := ValidPassEnv([]string{bad}); err == nil {
			t.Errorf("ValidPassEnv(%q) accepted", bad)
		}
	}
}
