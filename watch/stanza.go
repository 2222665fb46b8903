package watch

import (
	"encoding/json"
	"fmt"
)

// Watch is one entry of a Consul agent's `watches` configuration: Consul
// runs Args whenever the watched data changes.
type Watch struct {
	// Type is the watch type: key, keyprefix, services, nodes, service,
	// checks or event.
	Type string `json:"type"`
	// Key is the KV key of a "key" watch.
	Key string `json:"key,omitempty"`
	// Prefix is the KV prefix of a "keyprefix" watch.
	Prefix string `json:"prefix,omitempty"`
	// Service is the service of a "service" watch.
	Service string `json:"service,omitempty"`
	// Args is the handler command, run without a shell. It must not hold a
	// token: use --token-file or the environment.
	Args []string `json:"args"`
}

// Validate checks the fields Type needs.
func (w Watch) Validate() error {
	switch w.Type {
	case "key":
		if w.Key == "" {
			return fmt.Errorf("key watch without a key")
		}
	case "keyprefix":
		if w.Prefix == "" {
			return fmt.Errorf("keyprefix watch without a prefix")
		}
	case "service":
		if w.Service == "" {
			return fmt.Errorf("service watch without a service")
		}
	case "services", "nodes", "checks", "event":
	default:
		return fmt.Errorf("unknown watch type %q", w.Type)
	}
	if len(w.Args) == 0 || w.Args[0] == "" {
		return fmt.Errorf("%s watch without a handler command", w.Type)
	}
	return nil
}

// AgentConfig returns Consul agent configuration (JSON, for a file in
// /etc/consul.d/) holding exactly these watches.
func AgentConfig(watches []Watch) ([]byte, error) {
	for i, w := range watches {
		if err := w.Validate(); err != nil {
			return nil, fmt.Errorf("watch %d: %w", i+1, err)
		}
	}
	if watches == nil {
		watches = []Watch{}
	}
	out, err := json.MarshalIndent(struct {
		Watches []Watch `json:"watches"`
	}{watches}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode watches: %w", err)
	}
	return append(out, '\n'), nil
}
