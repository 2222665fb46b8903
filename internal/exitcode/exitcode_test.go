package exitcode

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/fault"
)

func TestCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, OK},
		{"answer no", Nof("hosts not on v2"), No},
		{"usage", Usagef("--host is empty"), Usage},
		{"input", fault.Inputf("line 3: bad count"), Usage},
		{"wrapped input", fmt.Errorf("dependencies: %w", fault.Inputf("bad")), Usage},
		{"unavailable", fault.Unavailable(errors.New("nova down")), Unavailable},
		{"connection refused", fmt.Errorf("read kv: %w", &url.Error{Op: "Get", URL: "http://127.0.0.1:1", Err: errors.New("connection refused")}), Unavailable},
		{"consul status", fmt.Errorf("txn: %w", api.StatusError{Code: 403, Body: "ACL not found"}), Unavailable},
		{"deadline", fmt.Errorf("wait: %w", context.DeadlineExceeded), Unavailable},
		{"unexpected", errors.New("index out of range"), No},
		{"outermost code wins", Wrap(No, fault.Unavailable(errors.New("x"))), No},
	} {
		if got := Code(tc.err); got != tc.want {
			t.Errorf("%s: Code(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}
