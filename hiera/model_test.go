package hiera

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	dep "github.com/hashicorp/consul-template/dependency"
	"github.com/hashicorp/consul/api"
	"gopkg.in/yaml.v3"
)

// TestEncodeRoundTrip: whatever the strings, the encoding parses back to the
// same keys and values, and is byte-for-byte the same every time.
func TestEncodeRoundTrip(t *testing.T) {
	vals := append([]string{}, hostile...)
	vals = append(vals, "\x00nul", "\x7fdel", "\u0085nel", "\ufeffbom", "\U0001F600", strings.Repeat("z", 5000))
	keys := map[string]any{}
	for i, v := range vals {
		keys["k::"+v] = []string{v, "x"}
		keys[strings.Repeat("k", i+1)] = v
	}
	keys["n"] = []int{1, 2}
	keys["b"] = true
	keys["i"] = 7
	out, err := EncodeKeys(keys)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		again, _ := EncodeKeys(keys)
		if !bytes.Equal(out, again) {
			t.Fatal("encoding is not deterministic")
		}
	}
	var back map[string]any
	if err := yaml.Unmarshal(out, &back); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(back) != len(keys) {
		t.Fatalf("%d keys back, want %d", len(back), len(keys))
	}
	for k, v := range back {
		back[k] = hieraInterpolate(t, k, v)
	}
	for k, v := range keys {
		var want any
		switch v := v.(type) {
		case []string:
			want = strs(v...)
		case []int:
			want = ints(v...)
		default:
			want = v
		}
		if !reflect.DeepEqual(back[k], want) {
			t.Errorf("key %q: got %#v, want %#v", k, back[k], want)
		}
	}
	// Every top-level line starts with a quoted key: nothing but the
	// encoder's own structure.
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.HasPrefix(line, `"`) && !strings.HasPrefix(line, "? ") && !strings.HasPrefix(line, ": ") {
			t.Errorf("line does not start with a quoted key: %q", line)
		}
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "f.yaml")
	changed, err := WriteFile(p, []byte("a: 1\n"))
	if err != nil || !changed {
		t.Fatalf("create: %v %v", changed, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
		t.Errorf("new file mode %v", fi.Mode().Perm())
	}
	os.Chmod(p, 0o600)
	if changed, err := WriteFile(p, []byte("a: 1\n")); err != nil || changed {
		t.Fatalf("same content: changed=%v err=%v", changed, err)
	}
	if changed, err := WriteFile(p, []byte("a: 2\n")); err != nil || !changed {
		t.Fatalf("new content: changed=%v err=%v", changed, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode not kept: %v", fi.Mode().Perm())
	}
	if data, _ := os.ReadFile(p); string(data) != "a: 2\n" {
		t.Errorf("content %q", data)
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Errorf("left files behind: %v", entries)
	}
	// A directory in the way fails without leaving a temp file.
	os.Mkdir(filepath.Join(dir, "d.yaml"), 0o755)
	if _, err := WriteFile(filepath.Join(dir, "d.yaml"), []byte("x")); err == nil {
		t.Error("writing over a directory succeeded")
	}
}

func TestValidNames(t *testing.T) {
	for _, ok := range []string{"mysql", "os-keystone", "a_b", "0x1F", "yes", strings.Repeat("a", MaxNameLen)} {
		if err := ValidServiceName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "my.sql", "a::b", "a b", "ü", "a\nb", strings.Repeat("a", MaxNameLen+1), "a/b", "#x"} {
		if err := ValidServiceName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, bad := range []string{"address", "port", "nodes"} {
		if err := ValidTaggedAddressKey(bad); err == nil {
			t.Errorf("tagged address key %q accepted", bad)
		}
	}
}

// TestEncodeMatchesModel: the renderer's incremental encoder writes exactly
// what the reference model (Data.YAML) does, on first render and after one
// service changes, with hostile values, prefix-sharing names, selections and
// dependency-only services.
func TestEncodeMatchesModel(t *testing.T) {
	mk := func(node, addr, status string, port int, tagged map[string]string) *dep.HealthService {
		hs := &dep.HealthService{Node: node, Address: addr, Port: port, Status: status}
		for k, v := range tagged {
			if hs.ServiceTaggedAddresses == nil {
				hs.ServiceTaggedAddresses = map[string]api.ServiceAddress{}
			}
			hs.ServiceTaggedAddresses[k] = api.ServiceAddress{Address: v}
		}
		return hs
	}
	catalog := map[string][]*dep.HealthService{
		"a":     {mk("n1", "10.0.0.1", "passing", 1, map[string]string{"eth0": "e1", "a: b": "x", "port": "p"})},
		"a-b":   {mk("n2", "yes", "warning", 2, nil), mk("n3", "p\nq: r", "critical", 0, map[string]string{"z": ""})},
		"a_b":   {},
		"ab":    {mk("n4", "\u2028", "passing", 3, map[string]string{"eth1": "#x"})},
		"mysql": {mk("db1", "10.0.0.5", "passing", 3306, nil), mk("db2", "10.0.0.6", "passing", 3306, nil)},
		"dep":   {mk("d1", "10.0.9.1", "passing", 9, nil)},
	}
	for _, tc := range []struct {
		name string
		sel  Selection
	}{
		{"all", Selection{Dependencies: Dependencies{{Service: "dep", Functional: 2}, {Service: "missing", Addressable: 1}}}},
		{"selected", Selection{Services: []string{"a", "mysql"}, Dependencies: Dependencies{{Service: "dep", Functional: 1}, {Service: "mysql", Addressable: 2}}}},
		{"expected", Selection{Services: []string{"a"}, Expect: []string{"zz-absent", "dep"},
			Dependencies: Dependencies{{Service: "missing", Addressable: 1}, {Service: "a-b"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFuncs(&tc.sel, slog.New(slog.NewTextHandler(io.Discard, nil)))
			render := func() {
				t.Helper()
				c := &Collector{f: f}
				for _, name := range []string{"mysql", "a", "ab", "a_b", "a-b", "dep"} {
					if c.Wants(name) {
						c.Add(name, catalog[name])
					}
				}
				want, err := c.data().YAML()
				if err != nil {
					t.Fatal(err)
				}
				got, err := f.encode(c)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("encode differs from the model:\n got:\n%s\nwant:\n%s", got, want)
				}
			}
			render()
			render() // from the cache
			catalog["mysql"] = append(append([]*dep.HealthService(nil), catalog["mysql"]...), mk("db3", "10.0.0.7", "critical", 3307, nil))
			catalog["dep"] = []*dep.HealthService{mk("d1", "10.0.9.1", "passing", 9, nil), mk("d2", "10.0.9.2", "passing", 9, nil)}
			render()
		})
	}
}

// TestExpectedServicesHaveKeys: a declared dependency that is selected and
// a service named by --expect-service get their services:: and
// healthy_services:: keys as empty lists while the catalog has no instance
// of them (Puppet code that looks them up compiles); a dependency the
// selection leaves out is counted only; a service with instances is output
// as usual.
func TestExpectedServicesHaveKeys(t *testing.T) {
	sel := &Selection{Services: []string{"web"}, Expect: []string{"keystone", "web"},
		Dependencies: Dependencies{{Service: "web", Addressable: 1}, {Service: "mysql", Addressable: 1}}}
	c := &Collector{f: NewFuncs(sel, slog.New(slog.NewTextHandler(io.Discard, nil)))}
	c.Add("web", []*dep.HealthService{{Node: "w1", Address: "10.0.0.1", Status: "passing"}})
	keys := c.data().Keys()
	for k, want := range map[string]any{
		"services::keystone::address":         []string{},
		"services::keystone::nodes":           []string{},
		"services::keystone::port":            []int{},
		"healthy_services::keystone::address": []string{},
		"healthy_services::keystone::nodes":   []string{},
		"healthy_services::keystone::port":    []int{},
		"services::web::address":              []string{"10.0.0.1"},
	} {
		if !reflect.DeepEqual(keys[k], want) {
			t.Errorf("%s = %#v, want %#v", k, keys[k], want)
		}
	}
	for k := range keys {
		if strings.Contains(k, "::mysql::") && !strings.HasPrefix(k, "orchestrate::") {
			t.Errorf("%s output for a dependency the selection leaves out", k)
		}
	}
	if keys["orchestrate::dependencies_met"] != false {
		t.Errorf("dependencies_met = %v with mysql absent", keys["orchestrate::dependencies_met"])
	}
}
