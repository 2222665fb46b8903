package hiera

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// tooManyConns is the hint for an agent's connection limit: an agent
// accepts at most limits.http_max_conns_per_client (200 by default)
// concurrent HTTP connections from one address, answering 429 or closing
// the connection past it, and consul-template holds one blocking query per
// service.
const tooManyConns = "the Consul agent refuses more concurrent HTTP connections from this address " +
	"(limits.http_max_conns_per_client, 200 by default): hiera-services holds one query per selected service; " +
	"select fewer services (--service, --service-regex) or raise that limit in this agent's configuration"

// queryCause matches consul-template's query errors:
// "health.service(web|any): Unexpected response code: 429 (body)".
var queryCause = regexp.MustCompile(`^([a-z.]+\([^)]*\)): (.*)$`)

// causeKind sorts a query error.
type causeKind int

const (
	// causeOther: anything else (the message says what).
	causeOther causeKind = iota
	// causeStatus: the agent answered with an error status.
	causeStatus
	// causeLimit: a 429.
	causeLimit
	// causeClosed: the agent closed the connection without an answer: it
	// cannot be reached, or it is past its connection limit.
	causeClosed
)

// queryError splits a consul-template query error into the query, a cause
// that is the same for every query meeting it, and its kind.
func queryError(err error) (query, cause string, kind causeKind) {
	cause = err.Error()
	if m := queryCause.FindStringSubmatch(cause); m != nil {
		query, cause = m[1], m[2]
	}
	switch i := strings.Index(cause, "Unexpected response code: "); {
	case strings.Contains(cause, "Unexpected response code: 429"):
		return query, cause[i:], causeLimit
	case i >= 0:
		return query, cause[i:], causeStatus
	case strings.Contains(cause, "readLoopPeekFailLocked") || strings.Contains(cause, "connection reset by peer") || strings.HasSuffix(cause, ": EOF"):
		return query, "the agent closed the connection without an answer", causeClosed
	}
	return query, cause, causeOther
}

// explain adds what to do to the error that ended a once-mode render
// when its cause is the agent's connection limit: a 429, or a connection
// the agent closed while it still answers.
func (r *Renderer) explain(err error) error {
	if err == nil {
		return nil
	}
	switch _, _, kind := queryError(err); kind {
	case causeLimit:
		return fmt.Errorf("%w; %s", err, tooManyConns)
	case causeClosed:
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, serr := r.Client.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx)); serr == nil {
			return fmt.Errorf("%w; the agent answers but closed this connection: most likely %s", err, tooManyConns)
		}
	}
	return err
}

// queryTrouble logs Consul queries of --watch that the agent refused or
// dropped, once per change of cause, naming the cause (status code and
// message) and the first query that met it, and logs when queries answer
// again. consul-template itself only logs "sending server error back to
// caller", once per failure, without the error.
type queryTrouble struct {
	log *slog.Logger

	mu      sync.Mutex
	cause   string // guarded by mu: the failing cause, "" while queries answer
	queries map[string]bool
}

// fail records one failed query.
func (q *queryTrouble) fail(err error) {
	query, cause, kind := queryError(err)
	if kind == causeOther {
		// The agent cannot be reached: watchConsul logs that once per
		// change.
		q.log.Debug("consul query failed", "query", query, "cause", cause)
		return
	}
	if kind == causeClosed || kind == causeLimit {
		// Past its connection limit an agent answers 429 to some
		// connections and closes others: one cause.
		cause = "the agent refuses or closes connections (429 or no answer)"
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if cause == q.cause {
		q.queries[query] = true
		return
	}
	q.cause, q.queries = cause, map[string]bool{query: true}
	args := []any{"cause", cause, "query", query}
	if kind != causeStatus {
		args = append(args, "what_to_do", tooManyConns+" (if the agent is down, it is logged as unreachable)")
	}
	q.log.Warn("consul queries failing, retrying with backoff; the last good file stays", args...)
}

// ok records a complete render: every query answered.
func (q *queryTrouble) ok() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cause != "" {
		q.log.Info("consul queries answer again", "after", q.cause, "queries_that_failed", len(q.queries))
		q.cause, q.queries = "", nil
	}
}
