package reaper

import (
	"fmt"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/internal/yamlconf"
	"gopkg.in/yaml.v3"
)

// Lifecycle hooks, as AWS Auto Scaling's: a role's on_launch holds each
// new server (created, or a claimed standby) once it serves, before its
// journal entry finishes or the server it replaces is drained; its
// on_terminate holds each leaving server after its drain, before the
// delete. The reaper publishes the pending action (a request under
// <prefix>/hook/<role>/<host> and a Consul event), and a handler answers
// continue or abandon (`orchestrate hook complete`), or the timeout's
// default applies. An abandoned launch deletes the new server, which
// never served for its role; an abandoned terminate keeps the server, as
// a drain abort does, where the entry may be aborted (a scale-in or a
// retirement of a server that serves) and is ignored for a server
// replaced for its health. A hook only ever makes the reaper do less or
// later: its steps still pass the gate, the pause, the budgets and the
// journal.

const (
	// defaultHookTimeout: long enough for an inventory registration, a
	// cache warm-up or a deregistration; a replacement's old server stays
	// (and a leaving one in maintenance) meanwhile.
	defaultHookTimeout = 10 * time.Minute
	// maxHookTimeout is AWS's bound on a lifecycle action (48 hours): a
	// longer hold is an entry nobody is looking at.
	maxHookTimeout = 48 * time.Hour
)

// Hook is one of a role's lifecycle hooks.
type Hook struct {
	// Timeout is how long the hook waits for an answer (default 10m).
	Timeout Duration `yaml:"timeout"`
	// DefaultResult is the result without an answer by the timeout:
	// abandon (the default, AWS's) or continue.
	DefaultResult string `yaml:"default_result"`
}

// UnmarshalYAML reads a hook: a mapping of timeout and default_result
// (a node's Decode forgets the file's unknown-field check, so the keys
// are checked here).
func (h *Hook) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("want a mapping such as {timeout: 10m, default_result: abandon}, got %s", yamlconf.Describe(n))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		var err error
		switch k.Value {
		case "timeout":
			err = v.Decode(&h.Timeout)
		case "default_result":
			err = v.Decode(&h.DefaultResult)
		default:
			return fmt.Errorf("unknown field %q in a lifecycle hook (timeout, default_result)", k.Value)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// validateHooks fills in and checks the role's on_launch and
// on_terminate.
func (r *Role) validateHooks(field string) error {
	for _, h := range []struct {
		name string
		hook *Hook
	}{{"on_launch", r.OnLaunch}, {"on_terminate", r.OnTerminate}} {
		if h.hook == nil {
			continue
		}
		if h.hook.Timeout == 0 {
			h.hook.Timeout = Duration(defaultHookTimeout)
		}
		if h.hook.Timeout < 0 || h.hook.Timeout.D() > maxHookTimeout {
			return fmt.Errorf("%s.%s.timeout: must be a positive duration of at most %s, got %s", field, h.name, maxHookTimeout, h.hook.Timeout.D())
		}
		if h.hook.DefaultResult == "" {
			h.hook.DefaultResult = schema.HookAbandon
		}
		if err := schema.ValidHookResult(h.hook.DefaultResult); err != nil {
			return fmt.Errorf("%s.%s.default_result: want %s or %s, got %q", field, h.name, schema.HookContinue, schema.HookAbandon, h.hook.DefaultResult)
		}
	}
	return nil
}

// Hook returns the role's hook of kind (schema.HookLaunch or
// schema.HookTerminate), nil when it has none.
func (r *Role) Hook(kind string) *Hook {
	if kind == schema.HookLaunch {
		return r.OnLaunch
	}
	return r.OnTerminate
}

// HookOf returns the hook entry e waits for in its phase (kind, host and
// state); ok is false when e is in no hook's phase.
func HookOf(e *Entry) (kind, host string, st *reaperkv.HookState, ok bool) {
	switch e.Phase {
	case reaperkv.PhaseLaunchHook:
		return schema.HookLaunch, e.NewName, e.LaunchHook, true
	case reaperkv.PhaseTerminateHook:
		return schema.HookTerminate, e.OldName, e.TerminateHook, true
	}
	return "", "", nil, false
}

// HookRequestOf is the request of the hook entry e waits for, as the
// reaper publishes it; ok is false when e waits for none.
func HookRequestOf(e *Entry) (schema.HookRequest, bool) {
	kind, host, st, ok := HookOf(e)
	if !ok || st == nil {
		return schema.HookRequest{}, false
	}
	return schema.HookRequest{Role: e.Role, Host: host, Hook: kind, Entry: e.ID, Reason: e.Reason, Requested: st.Requested, Deadline: st.Deadline,
		Default: st.Default, AbandonIgnored: kind == schema.HookTerminate && !e.Abortable}, true
}
