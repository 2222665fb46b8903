package reaper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Server metadata keys the reaper sets on servers it creates.
const (
	// MetaRole names the server's role.
	MetaRole = "role"
	// MetaJournal names the journal entry that created the server, so a
	// retried create finds its server instead of making another.
	MetaJournal = "reaper-journal"
	// MetaStandby marks a standby of its role's warm pool (the value is
	// the role); a claim removes it.
	MetaStandby = "reaper-standby"
	// MetaSpec is the digest of the boot spec a server was built from
	// (BootSpec.Digest): a server whose value differs from its role's
	// current digest is drifted.
	MetaSpec = "reaper-spec"
)

// Nova server statuses the reaper looks at.
const (
	StatusActive = "ACTIVE"
	StatusBuild  = "BUILD"
	StatusError  = "ERROR"
	// StatusUnknown: Nova could not read the server (its cell did not
	// answer); at microversion 2.69 or later such a server is listed as a
	// partial record with this status.
	StatusUnknown = "UNKNOWN"
	// StatusSoftDeleted: deleted, kept by Nova until reclaimed (when the
	// cloud sets reclaim_instance_interval); StatusDeleted: deleted.
	// Either is gone for the reaper: not running, not a server of a role.
	StatusSoftDeleted = "SOFT_DELETED"
	StatusDeleted     = "DELETED"
	// StatusShutoff: powered off (a stopped standby).
	StatusShutoff = "SHUTOFF"
)

// knownStatus holds the Nova server statuses the planner understands (the
// API reference's list); a server in any other is in an unknown state and
// never acted on.
var KnownStatus = map[string]bool{
	StatusActive: true, StatusBuild: true, StatusError: true,
	"HARD_REBOOT": true, "MIGRATING": true, "PASSWORD": true, "PAUSED": true, "REBOOT": true,
	"REBUILD": true, "RESCUE": true, "RESIZE": true, "REVERT_RESIZE": true, "SHELVED": true,
	"SHELVED_OFFLOADED": true, "SHUTOFF": true, "SUSPENDED": true, "VERIFY_RESIZE": true,
}

// Server is what the reaper knows of a Nova server.
type Server struct {
	ID       string            `json:"id"`
	Name     string            `json:"name"`
	Status   string            `json:"status"`
	Created  time.Time         `json:"created"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// Fault is Nova's message for a server in ERROR ("No valid host...").
	Fault string `json:"fault,omitempty"`
	// Zone is the server's availability zone (Nova's
	// OS-EXT-AZ:availability_zone); empty while Nova has not placed it.
	Zone string `json:"zone,omitempty"`
}

// Partial reports whether the record is partial: Nova (microversion 2.69
// or later) lists a server whose cell it cannot reach with its ID and
// status UNKNOWN but no name or metadata, so the reaper cannot tell whose
// it is: the picture is incomplete.
func (s *Server) Partial() bool { return s.Name == "" }

// Gone reports whether Nova keeps the record of a deleted server (soft
// delete): not running, not a member of any role.
func (s *Server) Gone() bool { return s.Status == StatusSoftDeleted || s.Status == StatusDeleted }

// CreateRequest is one server to create.
type CreateRequest struct {
	Name     string
	Role     *Role
	Metadata map[string]string
	Tags     []string
	// UserData is what the server's cloud-init reads: the role's file,
	// with the server's token part appended under node_identity.
	UserData []byte
	// Zone is the availability zone the planner chose for the server
	// ("": Nova's choice).
	Zone string
	// ServerGroup is the ID of the role's server group, passed to Nova's
	// scheduler as the hint group ("": none).
	ServerGroup string
}

// Cloud is the compute service, kept small: the reaper lists once per cycle,
// and creates, polls and deletes single servers.
type Cloud interface {
	// List returns every server of the project, following pagination.
	List(ctx context.Context) ([]Server, error)
	// Get returns one server; an error of class NotFound when it is gone.
	Get(ctx context.Context, id string) (Server, error)
	// Create asks for a server and returns it as accepted (usually BUILD).
	Create(ctx context.Context, req CreateRequest) (Server, error)
	// Delete asks for a server's deletion; NotFound means already gone.
	Delete(ctx context.Context, id string) error
	// UnsetMetadata removes one metadata key of a server; a key that is
	// not there is no error.
	UnsetMetadata(ctx context.Context, id, key string) error
	// Stop powers a server off (Nova's os-stop: it keeps its disk);
	// Start powers it on. Either is a Conflict when the server is already
	// in that state (or in a task).
	Stop(ctx context.Context, id string) error
	Start(ctx context.Context, id string) error
	// ServerGroups keeps the roles' server groups (placement.go).
	ServerGroups
	// Repairer reboots and rebuilds servers in place (repair.go).
	Repairer
}

// ErrorClass says how the reaper handles a cloud error.
type ErrorClass int

// Error classes.
const (
	// Fatal: a request the cloud will never accept as made (bad flavor,
	// bad credentials). Logged, reported, not retried in a loop.
	Fatal ErrorClass = iota
	// Transient: 5xx, timeouts, connection errors. Retried next cycle.
	Transient
	// Quota: the project's quota is exhausted. Backoff; nothing is deleted
	// that would not be replaced.
	Quota
	// Capacity: the cloud has no room ("No valid host"). Handled as Quota.
	Capacity
	// NotFound: the server does not exist (a delete's goal).
	NotFound
	// Conflict: the server is in a state that refuses the request (409).
	Conflict
	// Stalled: the cloud accepted a delete but still has the server
	// cloud_timeout later (a stuck or soft delete). Retried with backoff.
	Stalled
)

// String names the class (for logs and the cloud errors metric).
func (c ErrorClass) String() string {
	switch c {
	case Transient:
		return "transient"
	case Quota:
		return "quota"
	case Capacity:
		return "capacity"
	case NotFound:
		return "not_found"
	case Conflict:
		return "conflict"
	case Stalled:
		return "stalled"
	default:
		return "fatal"
	}
}

// CloudError is a classified cloud error.
type CloudError struct {
	Class ErrorClass
	Op    string
	Err   error
}

// Error says what failed, its class, and the cloud's answer.
func (e *CloudError) Error() string { return fmt.Sprintf("%s: %s: %v", e.Op, e.Class, e.Err) }

// Unwrap returns the cloud's error.
func (e *CloudError) Unwrap() error { return e.Err }

// ClassOf returns the class of err: a CloudError's own, Transient for a
// context deadline, Fatal otherwise.
func ClassOf(err error) ErrorClass {
	var ce *CloudError
	if errors.As(err, &ce) {
		return ce.Class
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Transient
	}
	return Fatal
}

// ProvisionFailed is the error of a new server whose first boot reported
// provisioned failed: fatal (its image, user data or site code is at
// fault, not the cloud's capacity); it backs off the role's creates.
func ProvisionFailed(name, step string) *CloudError {
	return &CloudError{Class: Fatal, Op: "provision " + name, Err: fmt.Errorf("first boot failed: %s", step)}
}

// BootFailed is the error of a new server Nova put in ERROR: capacity when
// Nova found no host, else fatal; either backs off the role's creates.
func BootFailed(name, fault string) *CloudError {
	ferr := &CloudError{Class: Fatal, Op: "boot " + name, Err: fmt.Errorf("server went to ERROR: %s", fault)}
	if strings.Contains(fault, "No valid host") {
		ferr.Class = Capacity
	}
	return ferr
}
