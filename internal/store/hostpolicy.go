package store

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// policyName matches a role or prefix segment that HostPolicyRules puts
// in a rule: letters, digits, '.', '_' and '-', starting and ending with a
// letter or digit. Nothing in it can end an HCL string ('"', '\'), start an
// interpolation ("${", "%{") or widen a rule ('*', '/', white space).
var policyName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)

// policyHost is stricter for the host: Consul's rule for a node identity's
// name (the host's token carries one, and its sessions are on that node),
// which also keeps orchestrate-host-<host> a valid policy name.
var policyHost = regexp.MustCompile(`^[a-z0-9]([a-z0-9_-]*[a-z0-9])?$`)

// maxPolicyHost keeps orchestrate-host-<host> within Consul's 128 bytes
// for a policy name.
const maxPolicyHost = 128 - len("orchestrate-host-")

// HostPolicyRules renders the Consul ACL rules of host's own policy
// (orchestrate-host-<host>), host being of role, for KV prefix: write on
// exactly the records the host owns and nothing else. Every node also
// holds the shared read-only role (read of the whole prefix) and write on
// the doorbells (<prefix>/wake/); those are not here.
//
//   - key_prefix <prefix>/hosts/<host>/: its status, version, metrics and
//     drain answer (the trailing slash keeps web1 out of web10's records);
//   - key <prefix>/rollout/<role>/slot/<host>: its claim on an update slot;
//   - key <prefix>/rollout/<role>/hosts/<host>: its rollout progress;
//   - session <host>: sessions on its own node only (the slot's holder);
//   - key <prefix>/loggrants/<host>: read of its own Swift upload grant
//     (node.hcl denies the directory to every node).
//
// A name that could break out of an HCL string or widen a rule is refused
// (an InputError naming it), as is a prefix that is not such names joined
// by slashes.
func HostPolicyRules(prefix, host, role string) (string, error) {
	if err := schema.ValidPrefix(prefix); err != nil {
		return "", &InputError{Err: err}
	}
	for _, seg := range strings.Split(prefix, "/") {
		if !policyName.MatchString(seg) {
			return "", &InputError{Err: fmt.Errorf("prefix %q: segment %q has a character a policy rule cannot hold safely (letters, digits, '.', '_' and '-' only)", prefix, seg)}
		}
	}
	for _, n := range [][2]string{{"host", host}, {"role", role}} {
		if err := schema.ValidName(n[0], n[1]); err != nil {
			return "", &InputError{Err: err}
		}
	}
	if !policyHost.MatchString(host) || len(host) > maxPolicyHost {
		return "", &InputError{Err: fmt.Errorf("host %q cannot have a policy of its own: lower-case letters, digits, '-' and '_' only, starting and ending with a letter or digit, at most %d bytes (Consul's rule for a node identity)", host, maxPolicyHost)}
	}
	if !policyName.MatchString(role) {
		return "", &InputError{Err: fmt.Errorf("role %q cannot go into a policy rule: letters, digits, '.', '_' and '-' only, starting and ending with a letter or digit", role)}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# orchestrate-host-%s: the records of host %s (role %s), and nothing else.\n", host, host, role)
	ruleOf := func(policy, kind, name, why string) {
		fmt.Fprintf(&b, "\n# %s\n%s \"%s\" {\n  policy = \"%s\"\n}\n", why, kind, name, policy)
	}
	rule := func(kind, name, why string) { ruleOf("write", kind, name, why) }
	rule("key_prefix", HostDir(prefix, host), "Its status, version, metrics and drain answer.")
	rule("key", rolloutSlotKey(prefix, role, host), "Its claim on an update slot of its role, locked by its session.")
	rule("key", rolloutHostKey(prefix, role, host), "Its progress in its role's rollout.")
	rule("session", host, "Sessions on its own node (the holder of its slot claim).")
	rule("service", role, "Its role's service (named as the role), which its agent registers\n# with the node's token (the agent's default token).")
	ruleOf("read", "key", LogGrantKey(prefix, host), "Its own upload grant for its failure logs in Swift, renewed by the\n# reaper (the shared node policy denies every other host's).")
	return b.String(), nil
}
