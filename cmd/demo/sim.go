package main

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"

	"github.com/hashicorp/consul/api"
)

// roleSpec is one role of the simulated cloud.
type roleSpec struct {
	name  string
	count int
}

// roles of the simulated cloud, in the order they come up.
var roles = []roleSpec{{"db", 3}, {"lb", 2}, {"controller", 3}, {"compute", 4}}

// simNodes plays the machines of a cloud: Consul catalog nodes with their
// role's service, tagged addresses and health checks, registered through the
// real agent's catalog API as each machine's own agent would after Puppet
// ran. Each node has its own loopback address (127.0.0.0/8 is all loopback)
// and a real TCP listener for its service, so functional checks connect to
// something real.
type simNodes struct {
	c *api.Client
	// mu guards the fields below.
	mu        sync.Mutex
	next      int // last address octet handed out
	addrs     map[string]string
	listeners map[string]net.Listener
	// rolePort is the port a role's service listens on, on every node's
	// own address, as on a real cloud.
	rolePort map[string]int
}

func newSimNodes(c *api.Client) *simNodes {
	return &simNodes{c: c, next: 10, addrs: map[string]string{}, listeners: map[string]net.Listener{}, rolePort: map[string]int{}}
}

// up registers node of role with its service passing, listening for real.
func (s *simNodes) up(ctx context.Context, node, role string) error {
	s.mu.Lock()
	addr, ok := s.addrs[node]
	if !ok {
		s.next++
		addr = "127.0.0." + strconv.Itoa(s.next)
		s.addrs[node] = addr
	}
	l := s.listeners[node]
	port := s.rolePort[role]
	s.mu.Unlock()
	if l == nil {
		var err error
		l, err = net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
		if err != nil {
			// The role's port is taken on this address: any port will do.
			l, err = net.Listen("tcp", net.JoinHostPort(addr, "0"))
		}
		if err != nil {
			return fmt.Errorf("listen for %s: %w", node, err)
		}
		go accept(l)
		s.mu.Lock()
		s.listeners[node] = l
		if s.rolePort[role] == 0 {
			s.rolePort[role] = l.Addr().(*net.TCPAddr).Port
		}
		s.mu.Unlock()
	}
	return s.register(ctx, node, role, addr, l.Addr().(*net.TCPAddr).Port, api.HealthPassing)
}

func accept(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// register (re)writes node's catalog entry with every check in status.
func (s *simNodes) register(ctx context.Context, node, role, addr string, port int, status string) error {
	reg := &api.CatalogRegistration{
		Node:    node,
		Address: addr,
		TaggedAddresses: map[string]string{
			"lan": addr, "eth0": addr,
			// A second (storage) network, also on loopback.
			"eth1": "127.1.0." + addr[len("127.0.0."):],
		},
		NodeMeta: map[string]string{"role": role},
		Service: &api.AgentService{
			ID: role, Service: role, Port: port, Address: addr,
			Tags: []string{"v1"}, TaggedAddresses: map[string]api.ServiceAddress{"eth0": {Address: addr, Port: port}},
		},
		Checks: api.HealthChecks{
			{Node: node, CheckID: "alive", Name: "machine alive", Status: status},
			{Node: node, CheckID: "service:" + role, Name: role + " answers", Status: status, ServiceID: role},
		},
		SkipNodeUpdate: false,
	}
	_, err := s.c.Catalog().Register(reg, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("register %s: %w", node, err)
	}
	return nil
}

// setHealth turns every check of node to status.
func (s *simNodes) setHealth(ctx context.Context, node, role, status string) error {
	s.mu.Lock()
	addr, l := s.addrs[node], s.listeners[node]
	s.mu.Unlock()
	if l == nil {
		return fmt.Errorf("%s is not up", node)
	}
	return s.register(ctx, node, role, addr, l.Addr().(*net.TCPAddr).Port, status)
}

// down removes node from the catalog and closes its listener.
func (s *simNodes) down(ctx context.Context, node string) {
	s.mu.Lock()
	l := s.listeners[node]
	delete(s.listeners, node)
	s.mu.Unlock()
	if l != nil {
		l.Close()
	}
	_, _ = s.c.Catalog().Deregister(&api.CatalogDeregistration{Node: node}, (&api.WriteOptions{}).WithContext(ctx))
}

// names lists the nodes that are up, sorted.
func (s *simNodes) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.listeners {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// close stops every listener.
func (s *simNodes) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, l := range s.listeners {
		l.Close()
		delete(s.listeners, n)
	}
}
