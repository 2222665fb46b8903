package hiera

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"text/template"

	dep "github.com/hashicorp/consul-template/dependency"
	"gopkg.in/yaml.v3"
)

// Selection says which services a render puts into the output and what it
// needs for the header and the dependency keys.
type Selection struct {
	// Services names services to output; with ServiceRegex, a service named
	// here or matching it is output. Neither: every service.
	Services []string
	// ServiceRegex selects services by name.
	ServiceRegex *regexp.Regexp
	// Dependencies are the node's declared dependencies. Their services are
	// always queried, to count instances, even when not output.
	Dependencies Dependencies
	// Datacenter is the datacenter the data comes from, for the header.
	Datacenter string
	// QueryDatacenter, when set, adds @Datacenter to every catalog query;
	// otherwise the agent's own datacenter is queried.
	QueryDatacenter bool
}

func (s *Selection) selected(name string) bool {
	if len(s.Services) == 0 && s.ServiceRegex == nil {
		return true
	}
	for _, n := range s.Services {
		if n == name {
			return true
		}
	}
	return s.ServiceRegex != nil && s.ServiceRegex.MatchString(name)
}

func (s *Selection) dependency(name string) bool {
	for _, r := range s.Dependencies {
		if r.Service == name {
			return true
		}
	}
	return false
}

// Funcs are the template functions hiera-services adds to consul-template's
// through its ExtFuncMap. They keep state across renders only to warn once
// per skipped name.
type Funcs struct {
	sel *Selection
	log *slog.Logger

	mu     sync.Mutex
	warned map[string]bool // guarded by mu
}

// NewFuncs returns the template functions for a selection; log receives one
// warning per name skipped because it cannot form a hiera key.
func NewFuncs(sel *Selection, log *slog.Logger) *Funcs {
	return &Funcs{sel: sel, log: log, warned: map[string]bool{}}
}

// FuncMap returns the functions for config.TemplateConfig.ExtFuncMap:
//
//	hieraData  a fresh *Collector for this render
//	yamlQuote  a string as a double-quoted YAML scalar, for custom templates
func (f *Funcs) FuncMap() template.FuncMap {
	return template.FuncMap{
		"hieraData": func() *Collector { return &Collector{f: f, data: NewData(f.sel.Dependencies)} },
		"yamlQuote": YAMLQuote,
	}
}

func (f *Funcs) warnOnce(key, msg string, args ...any) {
	f.mu.Lock()
	seen := f.warned[key]
	f.warned[key] = true
	f.mu.Unlock()
	if !seen {
		f.log.Warn(msg, args...)
	}
}

// Collector gathers one render's services inside a template:
//
//	{{ $h := hieraData }}
//	{{ range services $h.DatacenterQuery }}{{ if $h.Wants .Name }}
//	  {{ $h.Add .Name (service (print .Name $h.DatacenterQuery) "any") }}
//	{{ end }}{{ end }}
//	{{ $h.YAML }}
type Collector struct {
	f    *Funcs
	data *Data
}

// Wants reports whether the render needs a service's instances: it is
// selected for output or is a dependency, and its name can form a hiera key.
// A name that cannot is skipped with one warning naming it.
func (c *Collector) Wants(name string) bool {
	if !c.f.sel.selected(name) && !c.f.sel.dependency(name) {
		return false
	}
	if err := ValidServiceName(name); err != nil {
		c.f.warnOnce("service\x00"+name, "skipping service: its name cannot form a hiera key", "service", name, "problem", err.Error())
		return false
	}
	return true
}

// Add records a service's instances, as returned by consul-template's
// `service "NAME" "any"`, and returns "" so it prints nothing.
func (c *Collector) Add(name string, services []*dep.HealthService) (string, error) {
	if err := ValidServiceName(name); err != nil {
		return "", fmt.Errorf("hieraData.Add: %w", err)
	}
	insts := make([]Instance, 0, len(services))
	for _, s := range services {
		if s == nil {
			continue
		}
		i := Instance{Node: s.Node, Address: s.Address, Port: s.Port, Status: s.Status}
		for k, ta := range s.ServiceTaggedAddresses {
			if err := ValidTaggedAddressKey(k); err != nil {
				c.f.warnOnce("tagged\x00"+name+"\x00"+k, "skipping tagged address: its key cannot form a hiera key", "service", name, "key", k, "problem", err.Error())
				continue
			}
			if i.TaggedAddresses == nil {
				i.TaggedAddresses = map[string]string{}
			}
			i.TaggedAddresses[k] = ta.Address
		}
		insts = append(insts, i)
	}
	if c.f.sel.selected(name) {
		c.data.AddService(name, insts)
	} else {
		c.data.CountService(name, insts)
	}
	return "", nil
}

// YAML returns the collected data as YAML (see Data.YAML).
func (c *Collector) YAML() (string, error) {
	b, err := c.data.YAML()
	return string(b), err
}

// Datacenter returns the datacenter the data comes from, reduced to
// characters that cannot end the header comment's line.
func (c *Collector) Datacenter() string {
	dc := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '?'
	}, c.f.sel.Datacenter)
	if dc == "" {
		return "(the local agent's)"
	}
	return dc
}

// DatacenterQuery returns "@DC" when queries name a datacenter, else "".
func (c *Collector) DatacenterQuery() string {
	if c.f.sel.QueryDatacenter && c.f.sel.Datacenter != "" {
		return "@" + c.f.sel.Datacenter
	}
	return ""
}

// YAMLQuote returns s as a double-quoted YAML scalar, safe as a key or a
// value whatever s holds.
func YAMLQuote(s string) (string, error) {
	out, err := yaml.Marshal(strNode(s))
	if err != nil {
		return "", fmt.Errorf("yamlQuote: %w", err)
	}
	return strings.TrimSuffix(string(out), "\n"), nil
}
