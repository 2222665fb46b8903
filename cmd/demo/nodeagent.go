package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// nodeAgents stand in for the simulated nodes' own Consul agents. The
// demo's nodes share its one real agent, but a node's commands expect an
// agent of their own in one respect: Consul creates a session on the node
// of the agent that serves the request, and a node's token may create
// sessions on its own node only (the holder of its rollout slot). So each
// node reaches the real agent through a loopback port of its own that
// names the node in the sessions it creates, as its own agent would, and
// passes every request (and Consul's answer, refusals included) through
// otherwise unchanged: the real agent checks every token.
type nodeAgents struct {
	target *url.URL
	// mu guards the fields below.
	mu      sync.Mutex
	addrs   map[string]string // node -> host:port
	servers []*http.Server
}

func newNodeAgents(agentHTTP string) *nodeAgents {
	return &nodeAgents{target: &url.URL{Scheme: "http", Host: agentHTTP}, addrs: map[string]string{}}
}

// addr is the address of node's agent, started on first use.
func (n *nodeAgents) addr(node string) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a, ok := n.addrs[node]; ok {
		return a, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("the agent port of %s: %w", node, err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(n.target) },
		// The command sees the failure as its agent's; a request its
		// command gave up on (a watch stopped) is no failure at all.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, "the agent: "+err.Error(), http.StatusBadGateway)
		},
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.URL.Path == "/v1/session/create" {
			if err := sessionOn(r, node); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	n.addrs[node] = l.Addr().String()
	n.servers = append(n.servers, srv)
	return n.addrs[node], nil
}

// maxSessionBody bounds a session's definition: a few fields.
const maxSessionBody = 64 << 10

// sessionOn names node in a session create request that names no node.
func sessionOn(r *http.Request, node string) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxSessionBody+1))
	if err != nil {
		return err
	}
	if len(body) > maxSessionBody {
		return fmt.Errorf("session definition over %d bytes", maxSessionBody)
	}
	def := map[string]any{}
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&def); err != nil {
			return fmt.Errorf("session definition: %w", err)
		}
	}
	if n, _ := def["Node"].(string); n == "" {
		def["Node"] = node
	}
	out, err := json.Marshal(def)
	if err != nil {
		return err
	}
	r.Body = io.NopCloser(bytes.NewReader(out))
	r.ContentLength = int64(len(out))
	return nil
}

// close stops every node's agent port.
func (n *nodeAgents) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range n.servers {
		_ = s.Close()
	}
	n.servers = nil
}
