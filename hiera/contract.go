package hiera

import (
	"github.com/jiocloud/orchestrate/internal/fault"
	"github.com/jiocloud/orchestrate/internal/hieradata"
)

// The dependencies file, the names that can form hiera keys and the keys
// of the dependency state are the contract with the programs that read the
// data; internal/hieradata owns them. These names keep the package's API.
type (
	// Requirement is one declared dependency.
	Requirement = hieradata.Requirement
	// Dependencies are a node's declared requirements, sorted by service.
	Dependencies = hieradata.Dependencies
	// InputError is bad input (a flag, the dependencies file, a template):
	// the binary exits 2 with its message.
	InputError = fault.InputError
)

// DefaultOut is where Puppet's hiera reads services.yaml.
const DefaultOut = hieradata.DefaultOut

// MaxNameLen bounds a service name or tagged-address key.
const MaxNameLen = hieradata.MaxNameLen

// maxInputFile bounds a --template as it bounds the dependencies file.
const maxInputFile = hieradata.MaxInputFile

var (
	// LoadDependencies reads a dependencies file.
	LoadDependencies = hieradata.LoadDependencies
	// ParseDependencies parses the contents of a dependencies file.
	ParseDependencies = hieradata.ParseDependencies
	// ValidServiceName reports whether a service name can form hiera keys.
	ValidServiceName = hieradata.ValidServiceName
	// ValidTaggedAddressKey reports whether a tagged-address key can form
	// a hiera key.
	ValidTaggedAddressKey = hieradata.ValidTaggedAddressKey
)
