package blocker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Endpoint is one instance of a service as Consul DNS returns it: one SRV
// record, so two instances on one address with different ports are two
// endpoints.
type Endpoint struct {
	// Target is the SRV target, such as "db1.node.dc1.consul.".
	Target string `json:"target"`
	// Address is the target's IPv4 or IPv6 address; empty when the server
	// gave none and a follow-up query found none.
	Address string `json:"address"`
	// Port is the SRV port.
	Port int `json:"port"`
}

// String is "address:port", or "target:port" when the address is unknown.
func (e Endpoint) String() string {
	host := e.Address
	if host == "" {
		host = e.Target
	}
	return net.JoinHostPort(host, strconv.Itoa(e.Port))
}

// DefaultQueryTimeout bounds one DNS exchange. The local agent answers in
// about a millisecond; two seconds is the usual resolver timeout and leaves a
// slow server room without stalling a poll for long.
const DefaultQueryTimeout = 2 * time.Second

// Resolver asks one DNS server for the SRV records of a name, with no cache:
// every call is a fresh query (Consul's DNS TTL is 0 by default, and a cached
// answer would defeat the purpose of polling).
type Resolver struct {
	// Server is the DNS server's host:port.
	Server string
	// Timeout bounds each exchange; zero means DefaultQueryTimeout.
	Timeout time.Duration
}

// RcodeError is an answer whose response code is neither NOERROR nor
// NXDOMAIN (SERVFAIL when Consul cannot reach its servers, REFUSED, ...).
type RcodeError struct {
	Name  string
	Rcode int
}

// Error names the query and the response code, such as "web.service.consul.:
// server answered SERVFAIL".
func (e *RcodeError) Error() string {
	return fmt.Sprintf("%s: server answered %s", e.Name, dns.RcodeToString[e.Rcode])
}

// ErrNoAnswer marks an error where the DNS server gave no answer at all
// (refused connection, timeout, garbled reply), as opposed to RcodeError.
var ErrNoAnswer = errors.New("no answer from DNS server")

// LookupSRV returns the endpoints for name, sorted by address and port.
// NXDOMAIN and an empty answer both mean zero endpoints and no error.
//
// The query goes over TCP: Consul trims UDP answers to
// dns_config.udp_answer_limit records (3 by default) and, unless
// dns_config.enable_truncate is set, does not even set the truncated bit, so
// a UDP client can never see a fourth instance. Only when TCP cannot be used
// at all does it fall back to UDP (and then retries over TCP on truncation
// as the protocol asks, which fails again and says so).
func (r *Resolver) LookupSRV(ctx context.Context, name string) ([]Endpoint, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeSRV)
	resp, err := r.exchange(ctx, m)
	if err != nil {
		return nil, err
	}
	switch resp.Rcode {
	case dns.RcodeSuccess:
	case dns.RcodeNameError:
		return nil, nil
	default:
		return nil, &RcodeError{Name: name, Rcode: resp.Rcode}
	}
	addrs := map[string]string{} // lower-case target -> address
	for _, rr := range resp.Extra {
		switch rec := rr.(type) {
		case *dns.A:
			key := strings.ToLower(rec.Hdr.Name)
			if _, ok := addrs[key]; !ok {
				addrs[key] = rec.A.String()
			}
		case *dns.AAAA:
			key := strings.ToLower(rec.Hdr.Name)
			if _, ok := addrs[key]; !ok {
				addrs[key] = rec.AAAA.String()
			}
		}
	}
	var eps []Endpoint
	for _, rr := range resp.Answer {
		srv, ok := rr.(*dns.SRV)
		if !ok {
			continue
		}
		key := strings.ToLower(srv.Target)
		addr, ok := addrs[key]
		if !ok {
			addr, err = r.lookupAddr(ctx, srv.Target)
			if err != nil {
				return nil, err
			}
			addrs[key] = addr
		}
		eps = append(eps, Endpoint{Target: srv.Target, Address: addr, Port: int(srv.Port)})
	}
	sortEndpoints(eps)
	return eps, nil
}

// lookupAddr asks for the A, then the AAAA record of a target the SRV answer
// carried no address for. A name without either gives "" and no error.
func (r *Resolver) lookupAddr(ctx context.Context, target string) (string, error) {
	for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		m := new(dns.Msg)
		m.SetQuestion(target, qtype)
		resp, err := r.exchange(ctx, m)
		if err != nil {
			return "", err
		}
		if resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError {
			return "", &RcodeError{Name: target, Rcode: resp.Rcode}
		}
		for _, rr := range resp.Answer {
			switch rec := rr.(type) {
			case *dns.A:
				return rec.A.String(), nil
			case *dns.AAAA:
				return rec.AAAA.String(), nil
			}
		}
	}
	return "", nil
}

// exchange sends m over TCP, falling back to UDP only when TCP fails.
func (r *Resolver) exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultQueryTimeout
	}
	tcp := &dns.Client{Net: "tcp", Timeout: timeout}
	resp, _, tcpErr := tcp.ExchangeContext(ctx, m, r.Server)
	if tcpErr == nil {
		return resp, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoAnswer, ctx.Err())
	}
	udp := &dns.Client{Net: "udp", Timeout: timeout, UDPSize: dns.DefaultMsgSize}
	um := m.Copy()
	um.SetEdns0(dns.DefaultMsgSize, false)
	resp, _, udpErr := udp.ExchangeContext(ctx, um, r.Server)
	if udpErr != nil {
		return nil, fmt.Errorf("%w: tcp: %v; udp: %v", ErrNoAnswer, tcpErr, udpErr)
	}
	if resp.Truncated {
		return nil, fmt.Errorf("%w: udp answer for %s truncated and tcp failed: %v", ErrNoAnswer, m.Question[0].Name, tcpErr)
	}
	return resp, nil
}

// sortEndpoints orders by address (numerically when both parse, so
// 10.0.0.9 comes before 10.0.0.10), then port, then target.
func sortEndpoints(eps []Endpoint) {
	sort.SliceStable(eps, func(i, j int) bool {
		a, b := eps[i], eps[j]
		if a.Address != b.Address {
			ia, errA := netip.ParseAddr(a.Address)
			ib, errB := netip.ParseAddr(b.Address)
			if errA == nil && errB == nil {
				return ia.Less(ib)
			}
			return a.Address < b.Address
		}
		if a.Port != b.Port {
			return a.Port < b.Port
		}
		return a.Target < b.Target
	})
}
