package logship

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/swifttest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// get reads url with no credentials and returns the status and body.
func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := Client(10 * time.Second).Get(url)
	if err != nil {
		t.Fatalf("GET: %v", Redact(err))
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// rawPut sends a PUT to url (a hand-made temp URL) and returns the status.
func rawPut(t *testing.T, url string, body []byte) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url, bytes.NewReader(body))
	resp, err := Client(10 * time.Second).Do(req)
	if err != nil {
		t.Fatalf("PUT: %v", Redact(err))
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A grant uploads under its prefix; the operator's GET temp URL, signed
// with the same key, reads the log back.
func TestSwiftUploadAndRead(t *testing.T) {
	s := swifttest.Start(t)
	c := s.NewContainer(t)
	ctx := ctxT(t)
	now := time.Now()
	g, err := SignGrant([]byte(c.Key), c.URL, "web1", now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := ObjectName("web1", "v42", "puppet", now)
	if err != nil {
		t.Fatal(err)
	}
	if err := Put(ctx, Client(DefaultTimeout), g, obj, []byte("Error: boom\n"), now); err != nil {
		t.Fatal(err)
	}
	u, err := SignGet([]byte(c.Key), c.URL, obj, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, u); code != http.StatusOK || string(body) != "Error: boom\n" {
		t.Fatalf("GET temp URL: %d %q", code, body)
	}
	if got := s.List(t, c.Name, "web1/"); len(got) != 1 || got[0] != obj {
		t.Fatalf("objects under web1/: %q, want [%s]", got, obj)
	}
	// The record's URL names the object; with no signature Swift refuses it.
	if code, _ := get(t, ObjectURL(c.URL, obj)); code != http.StatusUnauthorized {
		t.Fatalf("GET of the bare object URL: %d, want 401", code)
	}
}

// Host A's grant writes nothing under host B's prefix (nor under a name
// that merely extends A's: web1 is not web10), reads nothing, not even
// its own log, and lists nothing; a grant whose expiry has passed is
// refused by Swift.
func TestSwiftGrantConfinement(t *testing.T) {
	s := swifttest.Start(t)
	c := s.NewContainer(t)
	now := time.Now()
	exp := now.Add(time.Hour)
	a, err := SignGrant([]byte(c.Key), c.URL, "web1", exp)
	if err != nil {
		t.Fatal(err)
	}
	own := a.putURL("web1/v1/puppet/x.log")
	if code := rawPut(t, own, []byte("mine")); code != http.StatusCreated {
		t.Fatalf("PUT under its own prefix: %d", code)
	}
	q := own[strings.Index(own, "?"):]
	for _, tc := range []struct{ name, url string }{
		{"another host's prefix", c.URL + "/web2/v1/puppet/x.log" + q},
		{"a host name extending its own", c.URL + "/web10/v1/puppet/x.log" + q},
		{"the container's top", c.URL + "/x.log" + q},
		{"another container", s.StorageURL + "/other/web1/x.log" + q},
	} {
		t.Run("PUT "+tc.name, func(t *testing.T) {
			if code := rawPut(t, tc.url, []byte("forged")); code/100 == 2 {
				t.Fatalf("Swift took it: %d", code)
			}
		})
	}
	// Swift does not resolve "..": web1/../web2/x.log is a name under
	// web1/, its own.
	if code := rawPut(t, c.URL+"/web1/../web2/x.log"+q, []byte("dots")); code != http.StatusCreated {
		t.Fatalf("PUT of web1/../web2/x.log: %d", code)
	}
	for _, p := range []string{"web2/", "web10/", "x"} {
		if got := s.List(t, c.Name, p); len(got) != 0 {
			t.Fatalf("objects under %q after the forged PUTs: %q", p, got)
		}
	}
	// Forging the prefix parameter alone invalidates the signature.
	forged := strings.Replace(own, "temp_url_prefix=web1%2F", "temp_url_prefix=web2%2F", 1)
	forged = strings.Replace(forged, "/web1/", "/web2/", 1)
	if code := rawPut(t, forged, []byte("forged")); code != http.StatusUnauthorized {
		t.Fatalf("PUT with the prefix changed: %d, want 401", code)
	}
	for _, u := range []string{own, c.URL + q, c.URL + "/web2/v1/puppet/x.log" + q} {
		if code, _ := get(t, u); code != http.StatusUnauthorized {
			t.Fatalf("GET with the PUT grant: %d, want 401", code)
		}
	}
	// Expired: signed for a second ago. Put refuses before sending;
	// Swift refuses what is sent anyway.
	old, err := SignGrant([]byte(c.Key), c.URL, "web1", now.Add(-time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := Put(ctxT(t), Client(DefaultTimeout), old, "web1/v1/puppet/y.log", []byte("late"), now); !errors.Is(err, ErrExpired) {
		t.Fatalf("Put with an expired grant: %v, want ErrExpired", err)
	}
	if code := rawPut(t, old.putURL("web1/v1/puppet/y.log"), []byte("late")); code != http.StatusUnauthorized {
		t.Fatalf("Swift took an expired grant: %d", code)
	}
	// A grant signed with another key (the key was rotated) is refused,
	// and Put says so.
	other, _ := SignGrant([]byte("not-the-key"), c.URL, "web1", exp)
	if err := Put(ctxT(t), Client(DefaultTimeout), other, "web1/v1/puppet/z.log", []byte("x"), now); !errors.Is(err, ErrRefused) {
		t.Fatalf("Put with a wrongly signed grant: %v, want ErrRefused", err)
	}
}

// Swift down: the log waits in the spool, the error says unreachable and
// holds no signature; once Swift is back, Flush uploads it and empties the
// spool.
func TestSwiftDownSpooled(t *testing.T) {
	s := swifttest.Start(t)
	c := s.NewContainer(t)
	now := time.Now()
	g, err := SignGrant([]byte(c.Key), c.URL, "db1", now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	sh := &Shipper{Grant: func(context.Context) (Grant, error) { return g, nil }, Spool: Spool{Dir: t.TempDir()},
		MaxBytes: DefaultMaxBytes, Client: Client(5 * time.Second), Log: slog.New(slog.NewTextHandler(&logs, nil))}
	logFile := filepath.Join(t.TempDir(), "run.log")
	os.WriteFile(logFile, []byte("Error: db1 failed\n"), 0o644)
	obj, url, err := sh.Plan(ctxT(t), "db1", "v7", "puppet", now)
	if err != nil {
		t.Fatal(err)
	}
	if url != c.URL+"/db1/v7/puppet/"+now.UTC().Format(stampFormat)+".log" {
		t.Fatalf("planned URL %s", url)
	}
	s.StopProxy(t)
	res, err := sh.Ship(ctxT(t), obj, logFile)
	if !errors.Is(err, ErrUnreachable) || res.Left != 1 || res.Uploaded != 0 {
		t.Fatalf("Ship with Swift down: %+v %v, want unreachable and 1 left", res, err)
	}
	if strings.Contains(err.Error(), g.Signature) || strings.Contains(err.Error(), "temp_url") {
		t.Fatalf("error carries the signature: %v", err)
	}
	s.StartProxy(t)
	res, err = sh.Flush(ctxT(t))
	if err != nil || res.Uploaded != 1 || res.Left != 0 {
		t.Fatalf("Flush with Swift back: %+v %v", res, err)
	}
	if got := string(s.Get(t, c.Name, obj)); got != "Error: db1 failed\n" {
		t.Fatalf("uploaded %q", got)
	}
	if e, _, _ := sh.Spool.Entries(); len(e) != 0 {
		t.Fatalf("spool after the flush: %v", e)
	}
	if strings.Contains(logs.String(), g.Signature) {
		t.Fatal("a log line carries the signature")
	}
}

// A log of 20 MiB uploads capped: its head and its tail, with the marker
// between, at most the cap.
func TestSwiftHugeLogCapped(t *testing.T) {
	s := swifttest.Start(t)
	c := s.NewContainer(t)
	now := time.Now()
	g, _ := SignGrant([]byte(c.Key), c.URL, "web3", now.Add(time.Hour))
	path := filepath.Join(t.TempDir(), "huge.log")
	f, _ := os.Create(path)
	f.WriteString("HEAD: the run began\n")
	line := strings.Repeat("Notice: loop ", 7) + "\n"
	for n := 0; n < 20<<20; n += len(line) {
		f.WriteString(line)
	}
	f.WriteString("TAIL: Error: the step failed\n")
	f.Close()
	const max = 1 << 20
	sh := &Shipper{Grant: func(context.Context) (Grant, error) { return g, nil }, Spool: Spool{Dir: t.TempDir()},
		MaxBytes: max, Log: slog.New(slog.DiscardHandler)}
	obj, _ := ObjectName("web3", "v1", "puppet", now)
	if res, err := sh.Ship(ctxT(t), obj, path); err != nil || res.Uploaded != 1 {
		t.Fatalf("Ship: %+v %v", res, err)
	}
	got := s.Get(t, c.Name, obj)
	switch {
	case len(got) > max:
		t.Fatalf("uploaded %d bytes, cap %d", len(got), max)
	case len(got) < max-100:
		t.Fatalf("uploaded %d bytes, well under the cap %d", len(got), max)
	case !bytes.HasPrefix(got, []byte("HEAD: the run began\n")):
		t.Fatal("the head is lost")
	case !bytes.HasSuffix(got, []byte("TAIL: Error: the step failed\n")):
		t.Fatal("the tail is lost")
	case !bytes.Contains(got, []byte("[orchestrate: log capped at 1048576 bytes: ")):
		t.Fatal("no marker")
	}
}

// ReadCapped: the cut is exact, a small log is whole, a FIFO is refused
// without blocking, a cap below the minimum is refused.
func TestReadCapped(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	os.WriteFile(small, []byte("abc"), 0o644)
	if b, err := ReadCapped(small, MinMaxBytes); err != nil || string(b) != "abc" {
		t.Fatalf("small: %q %v", b, err)
	}
	big := filepath.Join(dir, "big")
	data := make([]byte, 100000)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	os.WriteFile(big, data, 0o644)
	b, err := ReadCapped(big, 10000)
	if err != nil {
		t.Fatal(err)
	}
	head, rest, ok := bytes.Cut(b, []byte("\n\n[orchestrate: "))
	if !ok || !bytes.Equal(head, data[:2500]) {
		t.Fatalf("head: %d bytes, ok %v", len(head), ok)
	}
	marker, tail, ok := bytes.Cut(rest, []byte("]\n\n"))
	if !ok || !bytes.Equal(tail, data[len(data)-len(tail):]) {
		t.Fatal("tail is not the file's end")
	}
	cut := len(data) - len(head) - len(tail)
	if !bytes.Contains(marker, []byte(": "+strconv.Itoa(cut)+" bytes cut here of 100000 in all")) {
		t.Fatalf("marker %q does not say %d bytes were cut", marker, cut)
	}
	if len(b) > 10000 {
		t.Fatalf("%d bytes over the cap", len(b))
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadCapped(fifo, MinMaxBytes); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a FIFO was read")
		}
	case <-time.After(5 * time.Second):
		// Opening a FIFO for reading blocks until a writer comes: open
		// one to unblock the goroutine, and fail.
		w, _ := os.OpenFile(fifo, os.O_WRONLY, 0)
		w.Close()
		t.Fatal("ReadCapped blocked on a FIFO")
	}
	if _, err := ReadCapped(small, 10); err == nil {
		t.Fatal("a cap of 10 bytes was taken")
	}
}
