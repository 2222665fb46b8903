package logship

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const sig = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseGrant(t *testing.T) {
	good := `{"container_url":"https://swift.example.net/v1/AUTH_ops/logs","prefix":"web1/","expires":"2026-01-01T00:00:00Z","signature":"` + sig + `"}`
	if g, err := ParseGrant([]byte(good)); err != nil || g.Host() != "web1" {
		t.Fatalf("good grant: %v %v", g, err)
	}
	for _, tc := range []struct{ name, json, want string }{
		{"not JSON", `{"container_url":`, "not JSON"},
		{"unknown field", `{"container_url":"x","token":"` + sig + `"}`, `unknown field "token"`},
		{"wrong type", `{"prefix":12}`, "field prefix: want a string, got a number"},
		{"expiry not a time", `{"expires":12}`, "not a grant"},
		{"expiry not RFC 3339", `{"expires":"tomorrow"}`, "a time that is not RFC 3339"},
		{"ftp URL", strings.Replace(good, "https://", "ftp://", 1), "want an http or https URL"},
		{"no container", strings.Replace(good, "/v1/AUTH_ops/logs", "/v1/AUTH_ops", 1), "/v1/<account>/<container>"},
		{"object path", strings.Replace(good, "/logs", "/logs/x", 1), "/v1/<account>/<container>"},
		{"credentials in URL", strings.Replace(good, "https://", "https://u:p@", 1), "must not carry credentials"},
		{"query", strings.Replace(good, "/logs", "/logs?a=b", 1), "no query"},
		{"prefix without slash", strings.Replace(good, `"web1/"`, `"web1"`, 1), "a host name and a slash"},
		{"prefix of two levels", strings.Replace(good, `"web1/"`, `"web1/x/"`, 1), "contains a slash"},
		{"empty prefix", strings.Replace(good, `"web1/"`, `"/"`, 1), "empty"},
		{"no expiry", strings.Replace(good, `"expires":"2026-01-01T00:00:00Z",`, ``, 1), "expires is missing"},
		{"short signature", strings.Replace(good, sig, "abc", 1), "signature is not"},
		{"non-hex signature", strings.Replace(good, sig, strings.Repeat("z", 64), 1), "signature is not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseGrant([]byte(tc.json))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), sig) {
				t.Fatalf("error quotes the signature: %v", err)
			}
		})
	}
}

// A grant printed by mistake shows no signature, however it is printed.
func TestGrantPrintsNoSignature(t *testing.T) {
	g, err := SignGrant([]byte("key"), "http://127.0.0.1:1/v1/AUTH_a/logs", "web1", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, g); strings.Contains(out, g.Signature) {
			t.Fatalf("%s prints the signature: %s", f, out)
		}
	}
	// The file is written 0600, and LoadGrant reads it back.
	p := filepath.Join(t.TempDir(), "grant.json")
	if err := WriteGrant(p, g); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Fatalf("grant file mode %v", st.Mode().Perm())
	}
	back, err := LoadGrant(p)
	if err != nil || back != g {
		t.Fatalf("LoadGrant: %v %v", back, err)
	}
	if _, err := LoadGrant(filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), ErrNoGrant.Error()) {
		t.Fatalf("missing grant file: %v", err)
	}
}

func TestObjectNames(t *testing.T) {
	at := time.Date(2026, 11, 27, 15, 4, 5, 6e6, time.UTC)
	name, err := ObjectName("web1", "v 1", "puppet", at)
	if err == nil {
		t.Fatalf("a version with a space was named: %s", name)
	}
	name, err = ObjectName("web1", "2026.11-é", "puppet", at)
	if err != nil || name != "web1/2026.11-é/puppet/20261127T150405.006Z.log" {
		t.Fatalf("ObjectName: %s %v", name, err)
	}
	o, err := ParseObjectName(name)
	if err != nil || o.Host != "web1" || o.Version != "2026.11-é" || o.Step != "puppet" || !o.Time.Equal(at) {
		t.Fatalf("ParseObjectName: %+v %v", o, err)
	}
	u := ObjectURL("http://127.0.0.1:8080/v1/AUTH_a/logs/", name)
	if u != "http://127.0.0.1:8080/v1/AUTH_a/logs/web1/2026.11-%C3%A9/puppet/20261127T150405.006Z.log" {
		t.Fatalf("ObjectURL: %s", u)
	}
	c, obj, ok := SplitObjectURL(u)
	if !ok || c != "http://127.0.0.1:8080/v1/AUTH_a/logs" || obj != name {
		t.Fatalf("SplitObjectURL: %s %s %v", c, obj, ok)
	}
	for _, bad := range []string{"file:///var/log/orchestrate/x.log", "http://h/logs/x.log", "http://h/v1/a/c", "http://h/v1/a/c/o?temp_url_sig=x"} {
		if _, _, ok := SplitObjectURL(bad); ok {
			t.Errorf("SplitObjectURL(%q) is ok", bad)
		}
	}
	for _, bad := range []string{"a/b/c", "a/b/c/d", "a/b/c/x.log", "a/b/c/d/20261127T150405.006Z.log"} {
		if _, err := ParseObjectName(bad); err == nil {
			t.Errorf("ParseObjectName(%q) is ok", bad)
		}
	}
}

// The spool keeps at most Max entries, dropping the oldest; an entry
// written by hand that does not match is reported, not uploaded.
func TestSpoolBound(t *testing.T) {
	s := Spool{Dir: t.TempDir(), Max: 3}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var names []string
	for i := 0; i < 5; i++ {
		n, _ := ObjectName("web1", "v1", "puppet", t0.Add(time.Duration(i)*time.Second))
		names = append(names, n)
		dropped, err := s.Add(n, []byte{byte('0' + i)}, t0.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if i >= 3 && (len(dropped) != 1 || dropped[0] != names[i-3]) {
			t.Fatalf("add %d dropped %v, want [%s]", i, dropped, names[i-3])
		}
	}
	os.WriteFile(filepath.Join(s.Dir, "deadbeef.json"), []byte(`{"object":"web2/v1/puppet/20260101T000000.000Z.log"}`), 0o600)
	os.WriteFile(filepath.Join(s.Dir, "junk.json"), []byte(`{`), 0o600)
	// Left by a crash: a log without its entry, a temporary file; an
	// old one goes, a fresh one (a write in progress) stays.
	old := time.Now().Add(-time.Hour)
	for _, n := range []string{"0123.log", ".x.json.tmp-1"} {
		os.WriteFile(filepath.Join(s.Dir, n), []byte("x"), 0o600)
		os.Chtimes(filepath.Join(s.Dir, n), old, old)
	}
	os.WriteFile(filepath.Join(s.Dir, "4567.log"), []byte("x"), 0o600)
	entries, bad, err := s.Entries()
	for n, want := range map[string]bool{"0123.log": false, ".x.json.tmp-1": false, "4567.log": true} {
		if _, err := os.Stat(filepath.Join(s.Dir, n)); (err == nil) != want {
			t.Errorf("%s left: %v, want %v", n, err == nil, want)
		}
	}
	if err != nil || len(entries) != 3 || len(bad) != 2 {
		t.Fatalf("entries %v bad %v err %v", entries, bad, err)
	}
	for i, e := range entries {
		if e.Object != names[i+2] {
			t.Fatalf("entry %d is %s, want %s", i, e.Object, names[i+2])
		}
		if b, err := s.Read(e); err != nil || string(b) != string(rune('2'+i)) {
			t.Fatalf("entry %d reads %q %v", i, b, err)
		}
	}
}
