// Package templates holds the consul-template templates, embedded with
// go:embed and overridable by path.
package templates
