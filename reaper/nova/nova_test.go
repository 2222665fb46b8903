package nova

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/jiocloud/orchestrate/reaper"
)

// Every Nova answer the reaper can get maps to the class it handles.
func TestClassifyNovaErrors(t *testing.T) {
	httpErr := func(code int, body string) error {
		return gophercloud.ErrUnexpectedResponseCode{Actual: code, Body: []byte(body), Method: "POST", URL: "http://127.0.0.1/servers"}
	}
	cases := []struct {
		name string
		err  error
		want reaper.ErrorClass
	}{
		{"quota 403", httpErr(403, `{"forbidden": {"message": "Quota exceeded for instances: Requested 1, but already used 2 of 2 instances", "code": 403}}`), reaper.Quota},
		{"quota 413 (older clouds)", httpErr(413, `{"overLimit": {"message": "Quota exceeded for cores"}}`), reaper.Quota},
		{"413 that is not quota is fatal (request body too large)", httpErr(413, `<html><body><h1>413 Request Entity Too Large</h1>Request is too large.</body></html>`), reaper.Fatal},
		{"plain 403 is fatal (policy)", httpErr(403, `{"forbidden": {"message": "Policy doesn't allow os_compute_api:servers:create"}}`), reaper.Fatal},
		{"no valid host", httpErr(500, `{"computeFault": {"message": "No valid host was found. There are not enough hosts available."}}`), reaper.Capacity},
		{"not found", httpErr(404, `{"itemNotFound": {"message": "Instance could not be found."}}`), reaper.NotFound},
		{"conflict", httpErr(409, `{"conflictingRequest": {"message": "Cannot 'delete' instance while it is in task_state deleting"}}`), reaper.Conflict},
		{"server error", httpErr(503, "Service Unavailable"), reaper.Transient},
		{"rate limited", httpErr(429, ""), reaper.Transient},
		{"bad request", httpErr(400, `{"badRequest": {"message": "Invalid flavorRef"}}`), reaper.Fatal},
		{"unauthorized", httpErr(401, ""), reaper.Fatal},
		{"wrapped", fmt.Errorf("page: %w", httpErr(404, "")), reaper.NotFound},
		{"timeout", context.DeadlineExceeded, reaper.Transient},
		{"cancelled (lost the lock)", context.Canceled, reaper.Transient},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, reaper.Transient},
		// The server_group_members quota holds the role's group: its
		// creates stop, not every role's (as a project quota's would).
		{"server group members quota", httpErr(403, `{"forbidden": {"message": "Quota exceeded, too many servers in group", "code": 403}}`), reaper.Fatal},
		{"a zone Nova does not offer", httpErr(400, `{"badRequest": {"message": "The requested availability zone is not available", "code": 400}}`), reaper.Fatal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := classify("create server web4", tc.err)
			if got := reaper.ClassOf(err); got != tc.want {
				t.Fatalf("class = %s, want %s (%v)", got, tc.want, err)
			}
			if u := errors.Unwrap(err); u == nil || u.Error() != tc.err.Error() {
				t.Fatal("the classified error does not wrap the original")
			}
			// A zone's own refusals back off that zone (in a role of
			// several); anything else the role, or every role.
			zone := tc.name == "no valid host" || tc.name == "a zone Nova does not offer"
			if got := reaper.ZoneRefusal(err); got != zone {
				t.Fatalf("ZoneRefusal = %v, want %v", got, zone)
			}
		})
	}
}
