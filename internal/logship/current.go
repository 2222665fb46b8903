package logship

import (
	"context"
	"errors"
	"log/slog"
)

// CurrentGrant is host's newest grant: the grant file at path (written at
// first boot from the reaper's user data) or, when the reaper renewed it,
// the one fromKV returns (its key in Consul, which only this host's token
// reads), written over the file so that it outlives a Consul outage. A
// grant in KV that is unreadable, for another host or older than the
// file's is ignored (logged); a KV that cannot be reached leaves the file.
func CurrentGrant(ctx context.Context, path, host string, fromKV func(context.Context) ([]byte, error), log *slog.Logger) (Grant, error) {
	file, ferr := LoadGrant(path)
	if ferr != nil && !errors.Is(ferr, ErrNoGrant) {
		log.Warn("the log grant file is unreadable; looking for a renewed one in Consul", "err", ferr)
	}
	if fromKV == nil {
		return file, ferr
	}
	raw, err := fromKV(ctx)
	switch {
	case err != nil:
		log.Debug("cannot read a renewed log grant from Consul; using the file", "err", err)
		return file, ferr
	case raw == nil:
		return file, ferr
	}
	kv, err := ParseGrant(raw)
	switch {
	case err != nil:
		log.Warn("the renewed log grant in Consul is unreadable; ignored", "err", err)
		return file, ferr
	case kv.Host() != host:
		log.Warn("the renewed log grant in Consul is for another host; ignored", "for", kv.Host(), "host", host)
		return file, ferr
	case ferr == nil && !kv.Expires.After(file.Expires):
		return file, nil
	}
	if err := WriteGrant(path, kv); err != nil {
		log.Warn("cannot keep the renewed log grant in its file", "path", path, "err", err)
	} else {
		log.Info("log grant renewed", "until", kv.Expires)
	}
	return kv, nil
}
