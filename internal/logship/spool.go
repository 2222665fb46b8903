package logship

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/fileutil"
)

// DefaultMaxSpooled bounds the spool: with the default cap at most 256 MiB
// of a node's disk, and more failures than a host has in the half hour of
// a Swift outage even when converge retries every minute; beyond it the
// oldest logs go first (the newest failure is the one that matters).
const DefaultMaxSpooled = 32

// strayAge is how old a file of the spool that belongs to no entry (a log
// whose entry was never written, a temporary file: a crash mid-write) must
// be before Entries removes it: older than any write in progress.
const strayAge = 10 * time.Minute

// Spool is a directory of logs waiting for upload: for each, the capped
// log <id>.log and its entry <id>.json, written in that order, each
// atomically, so an entry always names a whole log.
type Spool struct {
	Dir string
	// Max bounds the entries kept (DefaultMaxSpooled when 0).
	Max int
}

// Entry is one spooled log.
type Entry struct {
	// Object is the object name the log goes to.
	Object string `json:"object"`
	// Spooled is when it was spooled.
	Spooled time.Time `json:"spooled"`

	id string
}

func entryID(object string) string {
	h := sha256.Sum256([]byte(object))
	return hex.EncodeToString(h[:16])
}

// Add spools data for object (replacing an entry for the same object) and
// drops the oldest entries beyond Max, returning their object names.
func (s Spool) Add(object string, data []byte, now time.Time) (dropped []string, err error) {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("log spool: %w", err)
	}
	id := entryID(object)
	if err := fileutil.WriteAtomic(filepath.Join(s.Dir, id+".log"), data, 0o600); err != nil {
		return nil, fmt.Errorf("log spool: %w", err)
	}
	meta, err := json.Marshal(Entry{Object: object, Spooled: now.UTC()})
	if err != nil {
		return nil, err
	}
	if err := fileutil.WriteAtomic(filepath.Join(s.Dir, id+".json"), meta, 0o600); err != nil {
		return nil, fmt.Errorf("log spool: %w", err)
	}
	entries, _, err := s.Entries()
	if err != nil {
		return nil, err
	}
	max := s.Max
	if max <= 0 {
		max = DefaultMaxSpooled
	}
	for len(entries) > max {
		s.Remove(entries[0])
		dropped = append(dropped, entries[0].Object)
		entries = entries[1:]
	}
	return dropped, nil
}

// maxEntryFile bounds an entry's JSON.
const maxEntryFile = 16 << 10

// Entries lists the spooled logs, oldest first. Entries that cannot be read
// are returned as bad (file names), not removed: the operator looks.
func (s Spool) Entries() (entries []Entry, bad []string, err error) {
	list, err := os.ReadDir(s.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("log spool: %w", err)
	}
	ids := map[string]bool{}
	for _, d := range list {
		if id, ok := strings.CutSuffix(d.Name(), ".json"); ok {
			ids[id] = true
		}
	}
	for _, d := range list {
		id, ok := strings.CutSuffix(d.Name(), ".json")
		if !ok || strings.HasPrefix(id, ".") || !d.Type().IsRegular() {
			s.removeStray(d, ids)
			continue
		}
		p := filepath.Join(s.Dir, d.Name())
		data, err := fileutil.ReadLimited(p, maxEntryFile)
		var e Entry
		if err == nil {
			err = json.Unmarshal(data, &e)
		}
		if err == nil {
			_, err = ParseObjectName(e.Object)
		}
		if err == nil && id != entryID(e.Object) {
			err = errors.New("its name does not match its object")
		}
		if err != nil {
			bad = append(bad, p)
			continue
		}
		e.id = id
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool {
		if !entries[i].Spooled.Equal(entries[j].Spooled) {
			return entries[i].Spooled.Before(entries[j].Spooled)
		}
		return entries[i].Object < entries[j].Object
	})
	return entries, bad, nil
}

// removeStray removes a file of the spool that belongs to no entry once it
// is older than strayAge: the log of an entry never written, a temporary
// file left by a crash.
func (s Spool) removeStray(d os.DirEntry, ids map[string]bool) {
	name := d.Name()
	if id, ok := strings.CutSuffix(name, ".log"); ok && ids[id] {
		return
	}
	if !d.Type().IsRegular() {
		return
	}
	if info, err := d.Info(); err == nil && time.Since(info.ModTime()) > strayAge {
		os.Remove(filepath.Join(s.Dir, name))
	}
}

// Read returns an entry's log.
func (s Spool) Read(e Entry) ([]byte, error) {
	return os.ReadFile(filepath.Join(s.Dir, e.id+".log"))
}

// Remove deletes an entry: its JSON first, so a crash between leaves an
// orphan log file at worst, never an entry without its log.
func (s Spool) Remove(e Entry) {
	os.Remove(filepath.Join(s.Dir, e.id+".json"))
	os.Remove(filepath.Join(s.Dir, e.id+".log"))
}
