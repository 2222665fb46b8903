package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// The keys of the lifecycle hooks, under the prefix (see schema.HookRequest):
//
//	hook/<role>/<host>          the reaper's request: a lifecycle action of
//	                            host waits for an answer
//	hook-answer/<role>/<host>   the answer (orchestrate hook complete), with
//	                            a token that may write hook-answer/ (a
//	                            handler's or an operator's; no node's)
//
// Role first, so a handler's token can be confined to one role's answers
// (key_prefix "<p>/hook-answer/<role>/").
const (
	dirHook       = "hook"
	dirHookAnswer = "hook-answer"
)

// HookKey is hook/<role>/<host> under prefix.
func HookKey(prefix, role, host string) string { return schema.Join(prefix, dirHook, role, host) }

// HookAnswerKey is hook-answer/<role>/<host> under prefix.
func HookAnswerKey(prefix, role, host string) string {
	return schema.Join(prefix, dirHookAnswer, role, host)
}

// HookAnswerDir is hook-answer/ under prefix: what a hook handler's token
// needs key write on.
func HookAnswerDir(prefix string) string { return keyDir(prefix, dirHookAnswer) }

// ErrNoHook: no hook of this role and host waits for an answer.
var ErrNoHook = errors.New("no lifecycle hook waits for an answer")

// ErrHookAnswered: the hook was answered already; the first answer
// stands.
var ErrHookAnswered = errors.New("the lifecycle hook was answered already")

// addHook reads one key under hook/ or hook-answer/ into the snapshot;
// parts is the key's path under the prefix.
func (snap *Snapshot) addHook(p *api.KVPair, parts []string) {
	if len(parts) != 3 || schema.ValidName("role", parts[1]) != nil || schema.ValidName("host", parts[2]) != nil {
		snap.bad(p.Key, "not of the form %s/<role>/<host>", parts[0])
		return
	}
	role, host := parts[1], parts[2]
	if parts[0] == dirHook {
		r, err := schema.ParseHookRequest(role, host, p.Value)
		if err != nil {
			snap.bad(p.Key, "%v", err)
			return
		}
		r.Index = p.ModifyIndex
		schema.Set(snap.Hooks.Requests, role, host, r)
		return
	}
	a, err := schema.ParseHookAnswer(p.Value)
	if err != nil {
		// Never taken for an answer: the hook waits for a real one, or
		// its deadline.
		snap.bad(p.Key, "%v", err)
		schema.Set(snap.Hooks.Problems, role, host, schema.HookProblem{Why: p.Key + ": " + err.Error(), Index: p.ModifyIndex})
		return
	}
	a.Index = p.ModifyIndex
	schema.Set(snap.Hooks.Answers, role, host, a)
}

// answerHooks gives each request the answer that names its entry and
// hook (an answer to an earlier request is none).
func answerHooks(h schema.Hooks) {
	for role, reqs := range h.Requests {
		for host, r := range reqs {
			if a, ok := h.Answers[role][host]; ok && r.Answers(a) {
				r.Answer = &a
				reqs[host] = r
			}
		}
	}
}

// Hooks reads the lifecycle hooks' requests and answers.
func (s *Store) Hooks(ctx context.Context) (schema.Hooks, error) {
	snap := &Snapshot{Hooks: schema.NewHooks()}
	for _, dir := range []string{dirHook, dirHookAnswer} {
		base := keyDir(s.prefix, dir)
		pairs, meta, err := s.kv.List(base, readOpts(ctx))
		if err != nil {
			return schema.Hooks{}, fmt.Errorf("read %s: %w", base, err)
		}
		if err := hiddenByACLs(meta, base); err != nil {
			return schema.Hooks{}, err
		}
		for _, p := range pairs {
			snap.addHook(p, strings.Split(schema.RelKey(s.prefix, p.Key), "/"))
		}
	}
	answerHooks(snap.Hooks)
	return snap.Hooks, nil
}

// hookState is a hook request and the answer record, each with its
// modify index (0: absent); ans is nil when the record is no answer.
type hookState struct {
	req      *schema.HookRequest
	reqIndex uint64
	ans      *schema.HookAnswer
	ansIndex uint64
}

func (s *Store) readHook(ctx context.Context, role, host string) (hookState, error) {
	var h hookState
	k := HookKey(s.prefix, role, host)
	p, err := s.get(ctx, k)
	if err != nil || p == nil {
		return h, err
	}
	req, err := schema.ParseHookRequest(role, host, p.Value)
	if err != nil {
		return h, &InputError{Err: fmt.Errorf("%s: %w", k, err)}
	}
	h.req, h.reqIndex = &req, p.ModifyIndex
	a, err := s.get(ctx, HookAnswerKey(s.prefix, role, host))
	if err != nil || a == nil {
		return h, err
	}
	h.ansIndex = a.ModifyIndex
	if ans, err := schema.ParseHookAnswer(a.Value); err == nil {
		h.ans = &ans
	}
	return h, nil
}

// AnswerHook records the answer to the hook that waits for host of role
// (hook-answer/<role>/<host>), naming the request's entry and hook, in
// one transaction that checks the request is still the one read: an
// answer never lands on a hook that ended or was replaced. It returns the
// request with its answer. ErrNoHook when none waits; ErrHookAnswered,
// with the request and its first answer, when it was answered already
// (the first answer stands). A record left by an earlier hook, or one
// that is no answer, is replaced.
func (s *Store) AnswerHook(ctx context.Context, role, host string, a schema.HookAnswer) (*schema.HookRequest, error) {
	if err := schema.ValidName("role", role); err != nil {
		return nil, &InputError{Err: err}
	}
	if err := schema.ValidName("host", host); err != nil {
		return nil, &InputError{Err: err}
	}
	if err := schema.ValidHookResult(a.Result); err != nil {
		return nil, &InputError{Err: err}
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
		h, err := s.readHook(ctx, role, host)
		if err != nil {
			return nil, err
		}
		if h.req == nil {
			return nil, ErrNoHook
		}
		if h.ans != nil && h.req.Answers(*h.ans) {
			h.req.Answer = h.ans
			return h.req, ErrHookAnswered
		}
		a.Entry, a.Hook = h.req.Entry, h.req.Hook
		data, _ := json.Marshal(a)
		ok, resp, _, err := s.kv.Txn(api.KVTxnOps{
			{Verb: api.KVCheckIndex, Key: HookKey(s.prefix, role, host), Index: h.reqIndex},
			{Verb: api.KVCAS, Key: HookAnswerKey(s.prefix, role, host), Index: h.ansIndex, Value: data},
		}, readOpts(ctx))
		switch {
		case err != nil:
			return nil, fmt.Errorf("answer the %s hook of %s: %w", h.req.Hook, host, err)
		case ok:
			h.req.Answer = &a
			return h.req, nil
		case !movedUnder(resp):
			return nil, refusedOr(resp, fmt.Errorf("answer the %s hook of %s: transaction rolled back: %s", h.req.Hook, host, TxnErrors(resp)))
		}
		// The request or the answer moved since the read: read again.
	}
	return nil, fmt.Errorf("answer the hook of %s: %w", host, ErrConflict)
}
