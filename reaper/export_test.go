package reaper

// Test hooks for the external test package.

// AbandonLeadership makes the reaper, when its context ends, leave its lock
// and session behind as a killed process would.
func (r *Reaper) AbandonLeadership() { r.abandonLeadership() }

// SetAfterAction sets a hook called after each action is carried out.
func (r *Reaper) SetAfterAction(f func(Action)) { r.afterAction = f }

// Leading reports whether the reaper currently runs cycles as leader.
func (r *Reaper) Leading() bool {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	return r.leading
}
