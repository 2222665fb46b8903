package orchestrate

import (
	"context"
	"time"
)

// clockKey is the context key of a fixed clock for status.
type clockKey struct{}

// withClock is ctx carrying now as status's clock: the golden tests' way
// of drawing screens whose ages do not move from run to run.
func withClock(ctx context.Context, now func() time.Time) context.Context {
	return context.WithValue(ctx, clockKey{}, now)
}

// clockFrom is the clock ctx carries, nil for none (the store's own).
func clockFrom(ctx context.Context) func() time.Time {
	now, _ := ctx.Value(clockKey{}).(func() time.Time)
	return now
}
