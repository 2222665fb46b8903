package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/reapertest"
)

func fakeReaper(t *testing.T, f *reapertest.Cloud) *Reaper {
	cfg := reapertest.Config(t)
	cfg.CloudTimeout = reaper.Duration(200 * time.Millisecond)
	return &Reaper{cfg: cfg, cloud: f, log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: NewMetrics(),
		opts: options{now: time.Now}}
}

var notFound = &reaper.CloudError{Class: reaper.NotFound, Op: "get", Err: errors.New("404")}

func TestDeleteServer(t *testing.T) {
	deleting := func(context.Context, string) (reaper.Server, error) {
		return reaper.Server{Status: reaper.StatusActive}, nil
	}
	for _, tc := range []struct {
		name     string
		del      error
		get      func(context.Context, string) (reaper.Server, error)
		wantGone bool
		wantErr  reaper.ErrorClass
	}{
		{name: "already gone is done", del: notFound, get: func(context.Context, string) (reaper.Server, error) { return reaper.Server{}, notFound }, wantGone: true, wantErr: -1},
		{name: "gone after the delete is done", get: func(context.Context, string) (reaper.Server, error) { return reaper.Server{}, notFound }, wantGone: true, wantErr: -1},
		{name: "soft-deleted is gone", get: func(context.Context, string) (reaper.Server, error) {
			return reaper.Server{Status: reaper.StatusSoftDeleted}, nil
		}, wantGone: true, wantErr: -1},
		// Not gone yet is no error and no wait: the planner looks again.
		{name: "still listed is not gone, and no error", get: deleting, wantErr: -1},
		{name: "a failed look after an accepted delete is not gone, and no error",
			get: func(context.Context, string) (reaper.Server, error) {
				return reaper.Server{}, &reaper.CloudError{Class: reaper.Transient, Err: errors.New("503")}
			}, wantErr: -1},
		{name: "a refused delete is an error", del: &reaper.CloudError{Class: reaper.Conflict, Err: errors.New("409 locked")}, wantErr: reaper.Conflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gets := 0
			r := fakeReaper(t, &reapertest.Cloud{DeleteFunc: func(context.Context, string) error { return tc.del },
				GetFunc: func(ctx context.Context, id string) (reaper.Server, error) { gets++; return tc.get(ctx, id) }})
			gone, err := r.deleteServer(context.Background(), "id-1")
			if gone != tc.wantGone || (err == nil) != (tc.wantErr == -1) || (err != nil && reaper.ClassOf(err) != tc.wantErr) {
				t.Fatalf("gone %v, err %v; want gone %v, class %v", gone, err, tc.wantGone, tc.wantErr)
			}
			if gets > 1 {
				t.Fatalf("%d gets: deleteServer waited", gets)
			}
		})
	}
}

func TestBackoffDoublesAndCaps(t *testing.T) {
	r := fakeReaper(t, &reapertest.Cloud{})
	r.cfg.QuotaBackoff, r.cfg.QuotaBackoffMax = reaper.Duration(time.Minute), reaper.Duration(5*time.Minute)
	now := time.Now()
	r.opts.now = func() time.Time { return now }
	term := newTerm("session", now)
	quota := &reaper.CloudError{Class: reaper.Quota, Err: errors.New("403 Quota exceeded")}
	var got []time.Duration
	for i := 0; i < 5; i++ {
		r.backoff(term, "web", quota)
		got = append(got, term.quota.until.Sub(now))
	}
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoffs = %v, want %v", got, want)
		}
	}
	if !term.backoffOf("web").until.IsZero() {
		t.Fatal("a quota error backed off the role alone")
	}
	// A fatal or capacity error backs off its role only.
	r.backoff(term, "db", &reaper.CloudError{Class: reaper.Fatal, Err: errors.New("400 Invalid flavorRef")})
	r.backoff(term, "db", &reaper.CloudError{Class: reaper.Capacity, Err: errors.New("No valid host")})
	if d := term.backoffOf("db").until.Sub(now); d != 2*time.Minute {
		t.Fatalf("db backoff = %v, want 2m", d)
	}
	if !term.backoffOf("web").until.IsZero() {
		t.Fatal("db's error backed off web")
	}
	term.backoffReset("db", "")
	r.backoff(term, "db", &reaper.CloudError{Class: reaper.Fatal, Err: errors.New("again")})
	if d := term.backoffOf("db").until.Sub(now); d != time.Minute {
		t.Fatalf("after a success the backoff starts over: %v, want 1m", d)
	}
}
