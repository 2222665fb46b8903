package simcloud

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"

	"github.com/hashicorp/consul/api"
)

// Workload is a synthetic load on a role: a total spread over the role's
// serving nodes, each taking a share by its weight (1 unless set), so a
// node's value is Total x weight / (sum of the serving nodes' weights) and
// their average is Total / serving, as load balanced over a pool behaves.
// Tests and the demo report the values through a metric source (Consul
// KV, or a Prometheus exporter) and watch the autoscaler follow.
type Workload struct {
	// mu guards the fields below.
	mu     sync.Mutex
	total  float64
	weight map[string]float64
	// last holds each node's value at the last Spread, for the exporter.
	last map[string]float64
}

// NewWorkload returns a workload of total load.
func NewWorkload(total float64) *Workload {
	return &Workload{total: total, weight: map[string]float64{}, last: map[string]float64{}}
}

// SetTotal changes the total load.
func (w *Workload) SetTotal(total float64) {
	w.mu.Lock()
	w.total = total
	w.mu.Unlock()
}

// SetWeight gives node a share weight (1 by default).
func (w *Workload) SetWeight(node string, weight float64) {
	w.mu.Lock()
	w.weight[node] = weight
	w.mu.Unlock()
}

// Spread returns each serving node's value, and remembers them.
func (w *Workload) Spread(serving []string) map[string]float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	sum := 0.0
	for _, n := range serving {
		sum += w.weightOf(n)
	}
	out := make(map[string]float64, len(serving))
	for _, n := range serving {
		out[n] = w.total * w.weightOf(n) / sum
	}
	w.last = out
	return out
}

func (w *Workload) weightOf(node string) float64 {
	if v, ok := w.weight[node]; ok {
		return v
	}
	return 1
}

// ServingNodes lists the nodes whose instance of service passes all its
// checks (a node in maintenance does not): the nodes that take load.
func ServingNodes(ctx context.Context, c *api.Client, service string) ([]string, error) {
	entries, _, err := c.Health().Service(service, "", true, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Node.Node)
	}
	sort.Strings(out)
	return out, nil
}

// ServeHTTP is a Prometheus exporter of the last Spread: one sample per
// node, `orchestrate_sim_load{role=ROLE,host=NODE}`, with ROLE from the
// "role" query parameter (default web).
func (w *Workload) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	role := r.URL.Query().Get("role")
	if role == "" {
		role = "web"
	}
	w.mu.Lock()
	nodes := make([]string, 0, len(w.last))
	for n := range w.last {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	vals := make([]float64, len(nodes))
	for i, n := range nodes {
		vals[i] = w.last[n]
	}
	w.mu.Unlock()
	rw.Header().Set("Content-Type", "text/plain; version=0.0.4")
	io.WriteString(rw, "# HELP orchestrate_sim_load A node's share of the synthetic load.\n# TYPE orchestrate_sim_load gauge\n")
	for i, n := range nodes {
		fmt.Fprintf(rw, "orchestrate_sim_load{role=%q,host=%q} %v\n", role, n, vals[i])
	}
}
