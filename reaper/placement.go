package reaper

import (
	"context"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/internal/yamlconf"
)

// A role's anti_affinity: how Nova spreads its servers over hosts, through
// a server group of the role's own.
const (
	// AntiAffinitySoft (the default): Nova's soft-anti-affinity policy, a
	// weigher: servers go to different hosts where the cloud can, and
	// share one where it cannot.
	AntiAffinitySoft = "soft"
	// AntiAffinityHard: Nova's anti-affinity policy, a filter: never two
	// servers of the role on one host; a create with no host left fails
	// with "No valid host" (capacity).
	AntiAffinityHard = "hard"
	// AntiAffinityNone: no server group (a cloud whose policy forbids
	// them, or a role bigger than the project's server_group_members
	// quota).
	AntiAffinityNone = "none"
)

// Nova's server group policies (microversion 2.64 and later take one).
const (
	PolicySoftAntiAffinity = "soft-anti-affinity"
	PolicyAntiAffinity     = "anti-affinity"
)

// maxZones bounds a role's availability zones: each is looked at for every
// create, and a cloud has a handful.
const maxZones = 16

// ZoneList is a role's availability_zones.
type ZoneList []string

// UnmarshalYAML reads a list of zone names, and says so when the value is
// something else (a single name without brackets, say).
func (z *ZoneList) UnmarshalYAML(n *yaml.Node) error {
	var zones []string
	if err := n.Decode(&zones); err != nil {
		return fmt.Errorf("want a list of zone names such as [az1, az2], got %s", yamlconf.Describe(n))
	}
	*z = zones
	return nil
}

// ServerGroup is what the reaper knows of a Nova server group.
type ServerGroup struct {
	ID     string
	Name   string
	Policy string
	// Members are the IDs of the servers in the group.
	Members []string
}

// ServerGroups is the part of a cloud that keeps server groups: a role's
// servers are created in its group (the scheduler hint group), so Nova
// spreads them over hosts.
type ServerGroups interface {
	// ServerGroup returns one group; an error of class NotFound when it
	// is gone.
	ServerGroup(ctx context.Context, id string) (ServerGroup, error)
	// FindServerGroups returns the project's groups named name.
	FindServerGroups(ctx context.Context, name string) ([]ServerGroup, error)
	// CreateServerGroup makes a group with one policy.
	CreateServerGroup(ctx context.Context, name, policy string) (ServerGroup, error)
}

// Zones are the availability zones the role's creates are spread over:
// availability_zones, else boot.availability_zone alone; nil when neither
// is set (Nova chooses).
func (r *Role) Zones() []string {
	if len(r.AvailabilityZones) > 0 {
		return []string(r.AvailabilityZones)
	}
	if r.Boot.AvailabilityZone != "" {
		return []string{r.Boot.AvailabilityZone}
	}
	return nil
}

// HasZone reports whether zone is one of the role's zones.
func (r *Role) HasZone(zone string) bool {
	for _, z := range r.Zones() {
		if z == zone {
			return true
		}
	}
	return false
}

// GroupPolicy is the Nova policy of the role's server group; "" for
// anti_affinity none.
func (r *Role) GroupPolicy() string {
	switch r.AntiAffinity {
	case AntiAffinityNone:
		return ""
	case AntiAffinityHard:
		return PolicyAntiAffinity
	default:
		return PolicySoftAntiAffinity
	}
}

// GroupName is the name of the role's server group in Nova: found by it
// when the record of its ID is lost.
func (r *Role) GroupName() string { return "reaper-" + r.Name }

// validatePlacement checks availability_zones (each a plain zone name,
// listed once; never with boot.availability_zone) and anti_affinity.
func (r *Role) validatePlacement(field string) error {
	switch r.AntiAffinity {
	case AntiAffinitySoft, AntiAffinityHard, AntiAffinityNone:
	default:
		return fmt.Errorf("%s.anti_affinity: want %s, %s or %s, got %q", field, AntiAffinitySoft, AntiAffinityHard, AntiAffinityNone, r.AntiAffinity)
	}
	if len(r.AvailabilityZones) == 0 {
		return nil
	}
	if r.Boot.AvailabilityZone != "" {
		return fmt.Errorf("%s.availability_zones: set with boot.availability_zone %q: give the role's zones in availability_zones only (a list of one is a single zone)", field, r.Boot.AvailabilityZone)
	}
	if len(r.AvailabilityZones) > maxZones {
		return fmt.Errorf("%s.availability_zones: at most %d zones, got %d", field, maxZones, len(r.AvailabilityZones))
	}
	seen := map[string]bool{}
	for j, z := range r.AvailabilityZones {
		switch {
		case strings.TrimSpace(z) != z || z == "":
			return fmt.Errorf("%s.availability_zones[%d]: %q: want a zone name without leading or trailing spaces", field, j, z)
		case strings.Contains(z, ":"):
			// Nova reads zone:host[:node] as a host forced by an admin,
			// past the scheduler and the server group.
			return fmt.Errorf("%s.availability_zones[%d]: %q: want a zone name, not zone:host", field, j, z)
		case len(z) > 255:
			return fmt.Errorf("%s.availability_zones[%d]: longer than Nova's 255 characters", field, j)
		case seen[z]:
			return fmt.Errorf("%s.availability_zones[%d]: zone %q is listed twice", field, j, z)
		}
		seen[z] = true
	}
	return nil
}

// ZoneRefusal reports whether err, from a create in one availability
// zone, is that zone's refusal rather than the role's: no valid host
// there (capacity), or a zone Nova does not know or offer ("The requested
// availability zone is not available"). A role with other zones backs
// off that zone only; any other error backs off the role (or, for quota,
// every role).
func ZoneRefusal(err error) bool {
	switch ClassOf(err) {
	case Capacity:
		return true
	case Fatal:
		return strings.Contains(strings.ToLower(err.Error()), "availability zone")
	}
	return false
}
