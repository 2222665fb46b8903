// Package prometheus is the Prometheus metric source of the reaper's
// autoscaling: a role's PromQL evaluated through Prometheus' HTTP API with
// Prometheus' own HTTP client configuration.
package prometheus
