package logship

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"
)

// Kinds of upload failure, for the exit code and the retry.
var (
	// ErrUnreachable: Swift could not be reached or answered 5xx; retry.
	ErrUnreachable = errors.New("swift unreachable")
	// ErrRefused: Swift refused the grant (expired, revoked by a new key,
	// or for another prefix); retry with a renewed grant.
	ErrRefused = errors.New("swift refused the grant")
	// ErrExpired: the grant's expiry has passed; nothing was sent.
	ErrExpired = errors.New("the log grant has expired")
)

// DefaultTimeout bounds one upload: a capped log of 8 MiB takes well under
// a second on a cloud's network; a Swift that does not answer in 30 s is
// down, and the log waits in the spool.
const DefaultTimeout = 30 * time.Second

// Client returns the HTTP client uploads and reads use: it never follows a
// redirect (a grant's signature goes to the container's host and nowhere
// else) and gives up after timeout.
func Client(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// Put uploads data as object under grant g. Its errors name the object's
// URL without the signature, and wrap ErrUnreachable, ErrRefused or
// ErrExpired.
func Put(ctx context.Context, c *http.Client, g Grant, object string, data []byte, now time.Time) error {
	ourl := ObjectURL(g.ContainerURL, object)
	if !g.Covers(object) {
		return fmt.Errorf("upload %s: %w: the object is not under the grant's prefix %s", ourl, ErrRefused, g.Prefix)
	}
	if !now.Before(g.Expires) {
		return fmt.Errorf("upload %s: %w (at %s)", ourl, ErrExpired, g.Expires.UTC().Format(time.RFC3339))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, g.putURL(object), bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("upload %s: bad request", ourl)
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("upload %s: %w: %v", ourl, ErrUnreachable, Redact(err))
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode/100 == 5:
		return fmt.Errorf("upload %s: %w: %s", ourl, ErrUnreachable, resp.Status)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("upload %s: %w: %s (expired, or not signed with the container's temp URL key)", ourl, ErrRefused, resp.Status)
	default:
		return fmt.Errorf("upload %s: %w: %s", ourl, ErrRefused, resp.Status)
	}
}

// Redact is a transport error without the request's URL (which carries
// the signature): *url.Error's inner error.
func Redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return errors.New("timed out")
		}
		return ue.Err
	}
	return err
}

// FlushResult counts what a Flush did.
type FlushResult struct {
	// Uploaded and Left count the entries uploaded and still spooled.
	Uploaded, Left int
	// Bad lists entry files that could not be read (left in place).
	Bad []string
}

// Flush uploads the spooled logs, oldest first, removing each once Swift
// took it. It stops at the first log Swift could not take for a reason
// that holds for the rest (unreachable, refused, expired) and returns that
// error; a log outside the grant's prefix (spooled under another host
// name) is left and counted.
func Flush(ctx context.Context, c *http.Client, s Spool, g Grant, log *slog.Logger, now func() time.Time) (FlushResult, error) {
	entries, bad, err := s.Entries()
	res := FlushResult{Bad: bad}
	if err != nil {
		return res, err
	}
	for _, p := range bad {
		log.Warn("unreadable entry in the log spool, left in place", "file", p)
	}
	var first error
	for i, e := range entries {
		if !g.Covers(e.Object) {
			log.Warn("spooled log is outside this host's grant, left in place", "object", e.Object, "prefix", g.Prefix)
			res.Left++
			continue
		}
		data, err := s.Read(e)
		if err != nil {
			log.Warn("spooled log unreadable, dropped", "object", e.Object, "err", err)
			s.Remove(e)
			continue
		}
		if err := Put(ctx, c, g, e.Object, data, now()); err != nil {
			res.Left += len(entries) - i
			first = err
			break
		}
		s.Remove(e)
		res.Uploaded++
		log.Info("log uploaded", "url", ObjectURL(g.ContainerURL, e.Object), "bytes", len(data))
	}
	return res, first
}
