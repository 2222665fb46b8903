package logship

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Shipper uploads one host's logs under its grant, through its spool.
type Shipper struct {
	// Grant returns the host's current grant (ErrNoGrant when it has
	// none): LoadGrant of the grant file, or a renewed one.
	Grant func(ctx context.Context) (Grant, error)
	// Local, when set, is the grant Plan names objects under: one that
	// asks nothing of the network (the grant file), so that naming a log
	// never delays the status record it goes in. Grant when nil.
	Local func() (Grant, error)
	// Spool keeps what is not uploaded yet.
	Spool Spool
	// MaxBytes caps each log (ReadCapped).
	MaxBytes int64
	// Client sends the uploads (Client(DefaultTimeout) when nil).
	Client *http.Client
	Log    *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

func (s *Shipper) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

func (s *Shipper) client() *http.Client {
	if s.Client == nil {
		return Client(DefaultTimeout)
	}
	return s.Client
}

// Plan names host's log of step for version, from a run that started at
// started, and returns its object name and URL under the current grant:
// the URL is the status record's log_url, written before the upload. An
// expired grant still names the object (a renewed one uploads it); no
// grant is ErrNoGrant.
func (s *Shipper) Plan(ctx context.Context, host, version, step string, started time.Time) (object, objectURL string, err error) {
	var g Grant
	if s.Local != nil {
		g, err = s.Local()
	} else {
		g, err = s.Grant(ctx)
	}
	if err != nil {
		return "", "", err
	}
	if g.Host() != host {
		return "", "", fmt.Errorf("the log grant is for host %s, not %s", g.Host(), host)
	}
	object, err = ObjectName(host, version, step, started)
	if err != nil {
		return "", "", err
	}
	return object, ObjectURL(g.ContainerURL, object), nil
}

// Ship caps the log at path into the spool as object, then flushes the
// spool. The log is in the spool before anything is sent: an upload that
// fails (Swift down, the grant expired) leaves it there for the next
// flush, and the error says why.
func (s *Shipper) Ship(ctx context.Context, object, path string) (FlushResult, error) {
	data, err := ReadCapped(path, s.MaxBytes)
	if err != nil {
		return FlushResult{}, fmt.Errorf("read the log: %w", err)
	}
	dropped, err := s.Spool.Add(object, data, s.now())
	if err != nil {
		return FlushResult{}, err
	}
	for _, d := range dropped {
		s.Log.Warn("log spool full: the oldest log dropped unsent", "object", d, "spool", s.Spool.Dir)
	}
	return s.Flush(ctx)
}

// Flush uploads what the spool holds; with no grant it does nothing.
func (s *Shipper) Flush(ctx context.Context) (FlushResult, error) {
	g, err := s.Grant(ctx)
	if errors.Is(err, ErrNoGrant) {
		entries, bad, _ := s.Spool.Entries()
		return FlushResult{Left: len(entries), Bad: bad}, err
	}
	if err != nil {
		return FlushResult{}, err
	}
	return Flush(ctx, s.client(), s.Spool, g, s.Log, s.now)
}
