package daemon

// Test hooks for the external test package.

// AfterAction is an option setting a hook called after each action is
// carried out.
var AfterAction = withAfterAction

// AbandonWhen is an option: when the run ends and abandon says so, the
// reaper leaves its lock, session and service registration behind as a
// killed process would.
var AbandonWhen = withAbandon

// ClaimStep is an option setting a hook called before each step of a
// claim; an error it returns stops the claim there.
var ClaimStep = withClaimStep

// AbortStep is an option setting a hook called between an abort's
// journal write and the rest of it; an error it returns stops it there.
var AbortStep = withAbortStep

// RepairStep is an option setting a hook called between a repair step's
// journal write and its cloud call; an error it returns stops it there.
var RepairStep = withRepairStep

// Leading reports whether the reaper currently runs cycles as leader.
func (r *Reaper) Leading() bool { return r.status.isLeading() }
