// Package hiera is the data model of Puppet's hiera data rendered from the
// Consul catalog (services.yaml and dependency state) and its rendering.
package hiera
