package reaper

import (
	"fmt"
	"strings"
)

// bootFailed is the error of a new server Nova put in ERROR: capacity when
// Nova found no host, else fatal; either backs off the role's creates.
func BootFailed(name, fault string) *CloudError {
	ferr := &CloudError{Class: Fatal, Op: "boot " + name, Err: fmt.Errorf("server went to ERROR: %s", fault)}
	if strings.Contains(fault, "No valid host") {
		ferr.Class = Capacity
	}
	return ferr
}
