package daemon

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// When a cycle runs. A full cycle runs every interval, as before; with
// wake_on_change (the default) a cycle also starts early when
//
//   - Consul's health changes in what the cycle reads (a check turning
//     critical, passing again, a node leaving or entering maintenance),
//   - a KV record that can change a decision is written (a desired
//     count, the arm record, a hold, a drain answer: store.WakesReaper),
//   - the last plan's next deadline comes (a grace, a timeout, a backoff
//     or a drain running out: planner.Plan's NextDeadline),
//
// but never sooner than min_cycle_gap after the last cycle began: changes
// within the gap make one cycle. Two blocking queries watch Consul, one on
// health and one on the prefix, whatever the size of the fleet; lead owns
// them and they end with the leadership.

// Causes of a cycle, for reaper_cycle_wakeups_total.
const (
	// wakeStart is a leadership's first cycle.
	wakeStart    = "start"
	wakeInterval = "interval"
	wakeChange   = "change"
	wakeTimer    = "timer"
)

// The blocking queries' numbers.
const (
	// watchWaitTime is the longest one blocking query waits for a
	// change; Consul caps it at 10 minutes and adds up to 1/16 of it in
	// jitter. An idle watch then costs one request per 5 minutes.
	watchWaitTime = 5 * time.Minute
	// watchRetryMin and watchRetryMax bound the backoff of a failing
	// watch (the agent restarting, the network down): it doubles from a
	// quarter second, so an agent back within seconds is seen within
	// seconds, up to 30s, so a long outage costs two requests a minute.
	// The interval's full cycle goes on meanwhile.
	watchRetryMin = 250 * time.Millisecond
	watchRetryMax = 30 * time.Second
	// healthWatchFilter keeps the health watch's answers to the checks
	// that are not passing: its digest changes exactly when a check
	// enters or leaves that set or changes status within it, and its
	// answers stay small however large the fleet.
	healthWatchFilter = `Status != "passing"`
	// watchQuietPause is the least time between two queries of a watch
	// whose last answer changed nothing the cycle reads (the index moved
	// for a check's output, a key the cycle ignores): on a busy catalog
	// a watch asks at most four times a second, and a change after a
	// quiet spell is still seen at once, the query already waiting.
	watchQuietPause = 250 * time.Millisecond
)

// nextWake is when the cycle after the one that began at last starts,
// and why, given the plan's next deadline (zero: none) and when a change
// was first seen since that cycle began (zero: none): the earliest of the
// interval's end, the deadline and the change, but no sooner than gap
// after last.
func nextWake(last time.Time, interval, gap time.Duration, deadline, changed time.Time) (time.Time, string) {
	at, cause := last.Add(interval), wakeInterval
	if !deadline.IsZero() && deadline.Before(at) {
		at, cause = deadline, wakeTimer
	}
	if !changed.IsZero() && changed.Before(at) {
		at, cause = changed, wakeChange
	}
	if floor := last.Add(gap); at.Before(floor) {
		at = floor
	}
	return at, cause
}

// waitNext waits for the next cycle after the one that began at began,
// whose plan's deadline (on the wall clock) is deadline, and returns its
// cause; "" when ctx ended. changeCh is nil without wake_on_change.
func (r *Reaper) waitNext(ctx context.Context, began, deadline time.Time, changeCh <-chan struct{}) string {
	var changed time.Time
	for {
		at, cause := nextWake(began, r.cfg.Interval.D(), r.cfg.CycleGap(), deadline, changed)
		t := time.NewTimer(time.Until(at))
		select {
		case <-ctx.Done():
			t.Stop()
			return ""
		case <-changeCh:
			t.Stop()
			if changed.IsZero() {
				changed = time.Now()
			}
		case <-t.C:
			return cause
		}
	}
}

// askFunc runs one blocking query from index and returns the index
// Consul answered with and whether what the cycle reads changed since the
// last answer.
type askFunc func(ctx context.Context, index uint64) (uint64, bool, error)

// startWatches starts the health and KV watches, counted in wg; each
// sends on changeCh (buffered, one slot: changes coalesce) when the cycle
// should wake.
func (r *Reaper) startWatches(ctx context.Context, wg *sync.WaitGroup, changeCh chan<- struct{}) {
	wg.Go(func() { r.runWatch(ctx, "health", r.askHealth(), changeCh) })
	wg.Go(func() { r.runWatch(ctx, "kv", r.askKV(), changeCh) })
}

// runWatch runs ask again and again until ctx ends, as Consul's blocking
// query documentation says to: an index that goes backwards (an agent or
// server restored or restarted) starts over from 0, one below 1 becomes 1,
// errors back off and start over from 0 too (the agent may be back with
// its state lost). After an answer that woke the cycle a watch waits
// min_cycle_gap before it asks again (sooner would only wake a cycle that
// must wait for the gap anyway); after one that did not, watchQuietPause.
// It never stops the daemon: a watch that fails leaves the interval's
// cycles, and logs one line when it fails and one when it is back.
func (r *Reaper) runWatch(ctx context.Context, name string, ask askFunc, changeCh chan<- struct{}) {
	var index uint64
	retry := watchRetryMin
	failing := false
	for ctx.Err() == nil {
		began := time.Now()
		next, changed, err := ask(ctx, index)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.metrics.watchError(name)
			if !failing {
				r.log.Warn("watch failing: cycles run every interval until it is back", "watch", name, "err", err)
				failing = true
			} else {
				r.log.Debug("watch failing again", "watch", name, "err", err)
			}
			// The agent may come back restarted, with an index below
			// ours: a blocking query from ours would wait out its whole
			// wait time. Start over with a query that does not block.
			index = 0
			r.sleep(ctx, retry)
			retry = min(2*retry, watchRetryMax)
			continue
		}
		if failing {
			r.log.Info("watch back", "watch", name)
			failing = false
		}
		retry = watchRetryMin
		switch {
		case next < index:
			index = 0
		case next < 1:
			index = 1
		default:
			index = next
		}
		pause := min(watchQuietPause, r.cfg.CycleGap())
		if changed {
			select {
			case changeCh <- struct{}{}:
			default:
			}
			pause = r.cfg.CycleGap()
		}
		r.sleep(ctx, time.Until(began.Add(pause)))
	}
}

// askHealth watches the checks that are not passing; a change is a
// different set of (node, check, service, status).
func (r *Reaper) askHealth() askFunc {
	var last uint64
	first := true
	return func(ctx context.Context, index uint64) (uint64, bool, error) {
		opts := &api.QueryOptions{WaitIndex: index, WaitTime: watchWaitTime, Filter: healthWatchFilter}
		hcs, meta, err := r.client.Health().State(api.HealthAny, opts.WithContext(ctx))
		if err != nil {
			return 0, false, fmt.Errorf("consul health watch: %w", err)
		}
		d := checksDigest(hcs)
		changed := !first && d != last
		first, last = false, d
		return meta.LastIndex, changed, nil
	}
}

// checksDigest is a hash of the checks' identities and statuses, in an
// order that does not depend on Consul's.
func checksDigest(hcs api.HealthChecks) uint64 {
	rows := make([]string, len(hcs))
	for i, c := range hcs {
		rows[i] = c.Node + "\x00" + c.CheckID + "\x00" + c.ServiceID + "\x00" + c.Status
	}
	slices.Sort(rows)
	h := fnv.New64a()
	for _, row := range rows {
		h.Write([]byte(row))
		h.Write([]byte{'\n'})
	}
	return h.Sum64()
}

// askKV watches the prefix; a change is a key that store.WakesReaper
// names written or removed since the last answer (found by its modify
// index), so the reaper's own writes each cycle (its state report, its
// journal) do not wake it.
func (r *Reaper) askKV() askFunc {
	var seen map[string]uint64 // nil before the first answer
	dir := schema.PrefixDir(r.cfg.Prefix)
	return func(ctx context.Context, index uint64) (uint64, bool, error) {
		opts := &api.QueryOptions{WaitIndex: index, WaitTime: watchWaitTime}
		pairs, meta, err := r.client.KV().List(dir, opts.WithContext(ctx))
		if err != nil {
			return 0, false, fmt.Errorf("consul KV watch of %s: %w", dir, err)
		}
		now := make(map[string]uint64, len(pairs))
		changed := false
		for _, p := range pairs {
			now[p.Key] = p.ModifyIndex
			if seen != nil && !changed && seen[p.Key] != p.ModifyIndex && store.WakesReaper(r.cfg.Prefix, p.Key) {
				changed = true
			}
		}
		for k := range seen {
			if _, ok := now[k]; !ok && !changed && store.WakesReaper(r.cfg.Prefix, k) {
				changed = true
			}
		}
		seen = now
		return meta.LastIndex, changed, nil
	}
}
