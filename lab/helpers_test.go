//go:build lab

package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// wait polls cond every 2 s until it holds, failing t after limit, or at
// once when the invariant checker found a violation: the run stops on the
// first one.
func (l *Lab) wait(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		l.failOnViolation(t)
		if time.Since(start) > limit {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(2 * time.Second)
	}
	l.failOnViolation(t)
	return time.Since(start)
}

// failOnViolation fails t if the invariant checker found a violation.
func (l *Lab) failOnViolation(t *testing.T) {
	t.Helper()
	if v := l.Violations(); len(v) > 0 {
		t.Fatalf("invariant violated: %s (the timeline is in the summary)", v[0].What)
	}
}

// hold lets d pass, failing t as soon as the invariant checker finds a
// violation.
func (l *Lab) hold(t *testing.T, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(2 * time.Second) {
		l.failOnViolation(t)
	}
}

// healthy says whether every role is at its count, every server of it
// serving and on the version; with pool, also whether the warm pool holds
// its stopped standby: the cloud at rest.
func (l *Lab) healthy(ctx context.Context, pool bool) (bool, string) {
	o, err := l.Observation(ctx)
	if err != nil {
		return false, err.Error()
	}
	if pool && l.Size.Pool {
		recs, err := l.poolRecords(ctx)
		if err != nil {
			return false, err.Error()
		}
		if len(recs) != 1 || recs[0].State != "stopped" {
			return false, fmt.Sprintf("warm pool of %s: %+v, want one stopped standby", poolRole, recs)
		}
	}
	version := l.version
	for _, r := range l.Size.Roles {
		var names []string
		for _, s := range o.Servers {
			if s.Role == r.Name && !s.Standby {
				names = append(names, s.Name)
				if !o.Serving[s.Name] {
					return false, s.Name + " not serving"
				}
			}
		}
		if len(names) != r.Count {
			return false, fmt.Sprintf("role %s has %d servers, want %d", r.Name, len(names), r.Count)
		}
		if out, code := l.orchestrate(ctx, append([]string{"verify-hosts", version}, names...)...); code != 0 {
			return false, out
		}
	}
	return true, ""
}

// waitHealthy waits until every role serves at its count, on the version.
func (l *Lab) waitHealthy(t *testing.T, limit time.Duration, why string) time.Duration {
	t.Helper()
	return l.waitFor(t, limit, why, false)
}

// waitRest waits for the cloud at rest: healthy, and the warm pool full.
func (l *Lab) waitRest(t *testing.T, limit time.Duration, why string) time.Duration {
	t.Helper()
	return l.waitFor(t, limit, why, true)
}

// waitFor waits until the cloud is healthy (with pool, at rest), logging
// each new reason it is not, failing t after limit or on a violation.
func (l *Lab) waitFor(t *testing.T, limit time.Duration, why string, pool bool) time.Duration {
	t.Helper()
	ctx := context.Background()
	var last string
	start := time.Now()
	for {
		l.failOnViolation(t)
		ok, whyNot := l.healthy(ctx, pool)
		if ok {
			return time.Since(start)
		}
		if whyNot != last {
			t.Logf("%s: %s", why, whyNot)
			last = whyNot
		}
		if time.Since(start) > limit {
			t.Fatalf("%s: not healthy after %s: %s", why, limit, whyNot)
		}
		time.Sleep(3 * time.Second)
	}
}

// poolRecords are the warm pool records of poolRole.
func (l *Lab) poolRecords(ctx context.Context) ([]reaperkv.StandbyRecord, error) {
	pairs, _, err := l.Admin.KV().List(reaperkv.PoolKey(schema.DefaultPrefix, poolRole, ""), (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	var out []reaperkv.StandbyRecord
	for _, p := range pairs {
		var r reaperkv.StandbyRecord
		if err := json.Unmarshal(p.Value, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", p.Key, err)
		}
		out = append(out, r)
	}
	return out, nil
}
