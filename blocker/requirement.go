package blocker

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// Requirement is one SERVICE[@DC][:N] argument: at least Count endpoints of
// Service, in Datacenter when given (else the blocker's --datacenter, else
// the agent's own).
type Requirement struct {
	Service    string `json:"service"`
	Datacenter string `json:"datacenter,omitempty"`
	Count      int    `json:"required"`
}

// Name is how messages name the requirement: "SERVICE", or "SERVICE@DC"
// when it was given with its own datacenter.
func (r Requirement) Name() string {
	if r.Datacenter == "" {
		return r.Service
	}
	return r.Service + "@" + r.Datacenter
}

// ParseRequirement parses "SERVICE", "SERVICE:N", "SERVICE@DC" or
// "SERVICE@DC:N" (def endpoints when N is not given). The error names what
// is wrong: an empty or non-DNS-label service or datacenter name, a count
// that is not a number, or one below 1.
func ParseRequirement(arg string, def int) (Requirement, error) {
	name, count, hasCount := strings.Cut(arg, ":")
	service, dc, hasDC := strings.Cut(name, "@")
	r := Requirement{Service: service, Datacenter: dc, Count: def}
	if err := validLabel("service", service); err != nil {
		return Requirement{}, fmt.Errorf("%q: %w", arg, err)
	}
	if hasDC {
		if err := validLabel("datacenter", dc); err != nil {
			return Requirement{}, fmt.Errorf("%q: %w", arg, err)
		}
	}
	if hasCount {
		n, err := strconv.Atoi(count)
		if err != nil {
			return Requirement{}, fmt.Errorf("%q: count %q is not a whole number", arg, count)
		}
		r.Count = n
	}
	if r.Count < 1 {
		return Requirement{}, fmt.Errorf("%q: count %d is below 1", arg, r.Count)
	}
	return r, nil
}

// validLabel checks that s can be one label of a DNS name as Consul serves
// it: 1 to 63 letters, digits, '-' or '_' (Consul allows '_' in service
// names and answers for them).
func validLabel(what, s string) error {
	if s == "" {
		return fmt.Errorf("empty %s name", what)
	}
	if len(s) > 63 {
		return fmt.Errorf("%s name %q is longer than 63 characters, the limit of a DNS label", what, s)
	}
	for _, c := range s {
		ok := c == '-' || c == '_' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
		if !ok {
			return fmt.Errorf("%s name %q has %q: only letters, digits, '-' and '_' can be looked up in Consul DNS", what, s, c)
		}
	}
	return nil
}

// QueryName is the DNS name for service: "[TAG.]SERVICE.service[.DC].DOMAIN".
// domain must be fully qualified (see NormalizeDomain).
func QueryName(service, tag, datacenter, domain string) string {
	var b strings.Builder
	if tag != "" {
		b.WriteString(tag + ".")
	}
	b.WriteString(service + ".service.")
	if datacenter != "" {
		b.WriteString(datacenter + ".")
	}
	b.WriteString(domain)
	return b.String()
}

// NormalizeDomain checks a --domain value and makes it fully qualified
// ("consul" becomes "consul.").
func NormalizeDomain(domain string) (string, error) {
	d := dns.Fqdn(strings.TrimSpace(domain))
	if d == "." {
		return "", fmt.Errorf("empty domain")
	}
	if _, ok := dns.IsDomainName(d); !ok || strings.ContainsAny(d, " \t\\") {
		return "", fmt.Errorf("%q is not a domain name", domain)
	}
	return d, nil
}
