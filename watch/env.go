package watch

import (
	"fmt"
	"slices"
	"strings"
)

// secretEnv reports whether an environment variable carries a credential
// that a child command must not inherit unless the operator passes it by
// name: the Consul ACL token (and the file naming it) and every OpenStack
// variable (OS_PASSWORD, OS_APPLICATION_CREDENTIAL_SECRET, OS_TOKEN, and
// the OS_CLOUD/OS_AUTH_URL that go with them).
func secretEnv(name string) bool {
	return name == "CONSUL_HTTP_TOKEN" || name == "CONSUL_HTTP_TOKEN_FILE" || strings.HasPrefix(name, "OS_")
}

// ValidPassEnv checks the names given to --pass-env: each must be an
// environment variable name (letters, digits, '_', not starting with a
// digit).
func ValidPassEnv(names []string) error {
	for _, n := range names {
		if n == "" {
			return fmt.Errorf("--pass-env: empty variable name")
		}
		for i, c := range n {
			if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
				return fmt.Errorf("--pass-env %q: not an environment variable name", n)
			}
		}
	}
	return nil
}

// ChildEnv returns environ without the credentials a child command must
// not see (CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE, OS_*), except those
// named in pass. Commands that orchestrate runs (the update step, Puppet,
// validation checks, hiera-services' --exec) get this environment: they
// are operator scripts that need no Consul token or cloud password, and
// anything they log or leak could expose them.
func ChildEnv(environ, pass []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if secretEnv(name) && !slices.Contains(pass, name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}
