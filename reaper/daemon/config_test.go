package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/nodeid"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/reapertest"
)

// webFile writes a Prometheus web configuration for a test.
func webFile(t *testing.T, text string) string {
	path := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The configuration's files (user data, the web configuration, the node
// identity key) are read and checked by CheckConfig: a bad one is named.
func TestConfigFileErrorsNameTheField(t *testing.T) {
	cases := []struct{ name, old, yaml, want string }{
		{name: "prometheus unknown client field", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 2, max: 4, metric: {source: prometheus, prometheus: {url: 'http://127.0.0.1:9090', query: up, tls_confg: {}}}}", want: "tls_confg"},
		{name: "prometheus unknown client field, in the configuration's words", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 2, max: 4, metric: {source: prometheus, prometheus: {url: 'http://127.0.0.1:9090', query: up, tls_confg: {}}}}", want: `roles[0].autoscale.metric.prometheus: unknown key tls_confg: did you mean "tls_config"?`},
		{name: "prometheus client field near none", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 2, max: 4, metric: {source: prometheus, prometheus: {url: 'http://127.0.0.1:9090', query: up, colour: red}}}", want: "roles[0].autoscale.metric.prometheus: unknown key colour (not one of Prometheus' HTTP client settings)"},
		{name: "prometheus client value of the wrong kind", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 2, max: 4, metric: {source: prometheus, prometheus: {url: 'http://127.0.0.1:9090', query: up, follow_redirects: maybe}}}", want: `roles[0].autoscale.metric.prometheus: "maybe" is not the kind of value its setting takes`},
		{name: "missing user data", old: "      tags: [orchestrate]", yaml: "      tags: [orchestrate]\n      user_data_file: /nonexistent/ud", want: "user_data_file"},
		{name: "user data Nova would refuse", old: "      tags: [orchestrate]", yaml: "      tags: [orchestrate]\n      user_data_file: /dev/zero", want: "roles[0].boot.user_data_file: /dev/zero is larger than 49149 bytes"},
		{name: "web config with a misspelt key", old: "interval: 10s", yaml: "interval: 10s\nlisten: 0.0.0.0:9469\nweb_config_file: " + webFile(t, "tls_server_config:\n  cert_fil: /x\n"), want: `web.yml:2: unknown field "cert_fil" in tls_server_config: did you mean "cert_file"?`},
		{name: "web config with a number for the users", old: "interval: 10s", yaml: "interval: 10s\nlisten: 0.0.0.0:9469\nweb_config_file: " + webFile(t, "basic_auth_users: 3\n"), want: "web.yml:1: basic_auth_users: want a mapping (key: value), got the number 3"},
		{name: "web config with a password that is no hash", old: "interval: 10s", yaml: "interval: 10s\nlisten: 0.0.0.0:9469\nweb_config_file: " + webFile(t, "basic_auth_users: {admin: secret}\n"), want: "basic_auth_users: a password is not a bcrypt hash"},
		{name: "missing web config", old: "interval: 10s", yaml: "interval: 10s\nlisten: 0.0.0.0:9469\nweb_config_file: /nonexistent/web.yml", want: "line 5: web_config_file: /nonexistent/web.yml: no such file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(reapertest.GoodYAML, tc.old, tc.yaml, 1)
			if text == reapertest.GoodYAML {
				t.Fatalf("case does not change the config (%q not found)", tc.old)
			}
			c, err := reaper.ParseConfig(strings.NewReader(text))
			if err == nil {
				err = CheckConfig(c)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestLoadConfigReadsUserData(t *testing.T) {
	dir := t.TempDir()
	ud := filepath.Join(dir, "ud.sh")
	os.WriteFile(ud, []byte("#!/bin/sh\necho hi\n"), 0o600)
	path := filepath.Join(dir, "reaper.yaml")
	os.WriteFile(path, []byte(strings.Replace(reapertest.GoodYAML, "tags: [orchestrate]", "tags: [orchestrate]\n      user_data_file: "+ud, 1)), 0o600)
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckConfig(c); err != nil {
		t.Fatal(err)
	}
	if got := string(c.Role("web").Boot.UserData); !strings.Contains(got, "echo hi") {
		t.Fatalf("user data = %q", got)
	}
}

// A configuration "file" that never ends (a device, a wrong path) is refused
// after its size limit, not read until memory runs out.
func TestLoadConfigRefusesAnEndlessFile(t *testing.T) {
	_, err := LoadConfig("/dev/zero")
	if err == nil || !strings.Contains(err.Error(), "/dev/zero: larger than") {
		t.Fatalf("LoadConfig(/dev/zero) = %v, want a size error naming the file", err)
	}
}

// /metrics off loopback: a web configuration must serve TLS or ask for a
// password; one that sets only headers (valid for the toolkit) is refused,
// and on loopback any valid one will do.
func TestMetricsOffLoopbackNeedsTLSOrAuth(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	headersOnly := write("headers.yml", "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
	// bcrypt of "secret", as the toolkit's docs generate it.
	withAuth := write("auth.yml", "basic_auth_users:\n  prom: $2y$10$6vMhsnGs4yYNV.ALqvpcWO5wMdHAr1Y4X3y5V8Rr0kkmy64Q.u6/.\n")
	for _, tc := range []struct {
		listen, file, want string
	}{
		{"0.0.0.0:9469", headersOnly, "sets neither TLS"},
		{"0.0.0.0:9469", withAuth, ""},
		{"127.0.0.1:9469", headersOnly, ""},
	} {
		text := strings.Replace(reapertest.GoodYAML, "interval: 10s", "interval: 10s\nlisten: "+tc.listen+"\nweb_config_file: "+tc.file, 1)
		c, err := reaper.ParseConfig(strings.NewReader(text))
		if err == nil {
			err = CheckConfig(c)
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("listen %s with %s: %v", tc.listen, filepath.Base(tc.file), err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("listen %s with %s: %v, want an error naming %q", tc.listen, filepath.Base(tc.file), err, tc.want)
		}
	}
}

// node_identity: the key must load and be P-256, every server name must be
// a Consul node identity, and user data must be a part cloud-init can put
// beside the token's.
func TestNodeIdentityConfig(t *testing.T) {
	dir := t.TempDir()
	_, good, err := nodeid.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyFile := write("key.pem", good)
	notKey := write("garbage.pem", []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	mime := write("mime.txt", []byte("Content-Type: multipart/mixed; boundary=x\n\n--x--\n"))
	script := write("ud.sh", []byte("#!/bin/sh\necho hi\n"))
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"fine", "interval: 10s", "interval: 10s\nnode_identity: {key_file: " + keyFile + "}", ""},
		{"no key file", "interval: 10s", "interval: 10s\nnode_identity: {auth_method: x}", "node_identity.key_file: the reaper's private key is required"},
		{"missing key", "interval: 10s", "interval: 10s\nnode_identity: {key_file: /nonexistent/key.pem}", "node_identity.key_file"},
		{"not a key", "interval: 10s", "interval: 10s\nnode_identity: {key_file: " + notKey + "}", "no PEM private key"},
		{"upper case names", `name_template: "{role}{n}-prod"`, `name_template: "Web{n}"`, "must be a Consul node identity"},
		{"user data already MIME", "tags: [orchestrate]", "tags: [orchestrate]\n      user_data_file: " + mime, "already MIME"},
		{"a script is fine", "tags: [orchestrate]", "tags: [orchestrate]\n      user_data_file: " + script, ""},
	} {
		text := strings.Replace(reapertest.GoodYAML, tc.old, tc.new, 1)
		if !strings.Contains(text, "node_identity") {
			text += "node_identity: {key_file: " + keyFile + "}\n"
		}
		c, err := reaper.ParseConfig(strings.NewReader(text))
		if err == nil {
			err = CheckConfig(c)
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

// logs: needs node_identity, a container URL, a key file only the reaper
// reads holding a key, and sane timings; a bad one names the field.
func TestLogsConfig(t *testing.T) {
	dir := t.TempDir()
	_, nodeKey, err := nodeid.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	ni := "node_identity: {key_file: " + write("node.pem", nodeKey, 0o600) + "}\n"
	key := write("swift.key", []byte("s3cret\n"), 0o600)
	open := write("open.key", []byte("s3cret\n"), 0o644)
	empty := write("empty.key", []byte("\n"), 0o600)
	const url = "https://swift.example.net/v1/AUTH_ops/logs"
	logs := func(fields string) string { return "logs: {" + fields + "}\n" }
	for _, tc := range []struct{ name, text, want string }{
		{"fine", ni + logs("container_url: "+url+", temp_url_key_file: "+key), ""},
		{"no node_identity", logs("container_url: " + url + ", temp_url_key_file: " + key), "logs: needs node_identity"},
		{"no container", ni + logs("temp_url_key_file: "+key), "logs.container_url"},
		{"an object URL", ni + logs("container_url: "+url+"/x, temp_url_key_file: "+key), "logs.container_url"},
		{"no key file", ni + logs("container_url: "+url), "logs.temp_url_key_file: the container's temp URL key is required"},
		{"a key every user reads", ni + logs("container_url: "+url+", temp_url_key_file: "+open), "readable by every user"},
		{"an empty key", ni + logs("container_url: "+url+", temp_url_key_file: "+empty), "is empty"},
		{"a missing key file", ni + logs("container_url: "+url+", temp_url_key_file: "+key+".none"), "logs.temp_url_key_file"},
		{"a grant of a second", ni + logs("container_url: "+url+", temp_url_key_file: "+key+", grant_lifetime: 1s"), "logs.grant_lifetime"},
		{"renewal after the end", ni + logs("container_url: "+url+", temp_url_key_file: "+key+", grant_lifetime: 1h, renew_before: 2h"), "logs.renew_before"},
		{"an unknown field", ni + logs("container_url: "+url+", key: x"), `unknown field "key" in logs`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := reaper.ParseConfig(strings.NewReader(reapertest.GoodYAML + tc.text))
			if err == nil {
				err = CheckConfig(c)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("%v, want an error naming %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "s3cret"):
				t.Fatalf("the error shows the key: %v", err)
			}
			if tc.want == "" && (string(c.Logs.Key) != "s3cret" || c.Logs.GrantLifetime.D() != reaper.DefaultGrantLifetime) {
				t.Fatalf("logs after CheckConfig: %+v", c.Logs)
			}
		})
	}
}
