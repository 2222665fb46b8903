package reaper

import "github.com/jiocloud/orchestrate/internal/store/reaperkv"

// Entry is one journal entry; its format, kinds and phases are part of
// the KV layout, in internal/store.
type Entry = reaperkv.JournalEntry

// Armed is the value of <prefix>/reaper/armed.
type Armed = reaperkv.ArmRecord
