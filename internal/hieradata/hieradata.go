// Package hieradata is the contract between hiera-services, which renders
// Puppet's hiera data from the Consul catalog, and the programs that read
// or configure it (orchestrate converge, orchestrate watch-config): the
// node's dependencies file, the names that can form hiera keys, and the
// keys of the dependency state. It links neither consul-template nor the
// cloud client, so the orchestrate binary every node runs stays small.
package hieradata

import "github.com/jiocloud/orchestrate/internal/paths"

// DefaultOut is the services.yaml hiera-services writes and converge reads
// when not told otherwise: where the package's hiera level reads it.
const DefaultOut = paths.HieraData

// Keys of the dependency state in services.yaml.
const (
	// KeyDependenciesMet is true when every declared dependency is met.
	KeyDependenciesMet = "orchestrate::dependencies_met"
	// KeyUnmetDependencies lists the services whose dependency is not met.
	KeyUnmetDependencies = "orchestrate::unmet_dependencies"
	// DependencyKeyPrefix starts the per-dependency count keys:
	// orchestrate::dependencies::<service>::{addressable,functional}[_required].
	DependencyKeyPrefix = "orchestrate::dependencies::"
)
