// Package templates holds the consul-template templates, embedded in the
// binaries and overridable by path.
package templates

import (
	_ "embed"
)

// ServicesYAML is services.yaml.ctmpl, the template of Puppet's hiera data
// (services.yaml) rendered by hiera-services.
//
//go:embed services.yaml.ctmpl
var ServicesYAML string
