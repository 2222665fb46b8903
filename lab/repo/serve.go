package repo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"strings"
	"time"
)

// Server is the repository's HTTP server, which Serve started.
type Server struct {
	// URL is the repository's address for an apt source line:
	// http://ADDR/ (the line is "deb [signed-by=KEYRING] URL ./").
	URL  string
	done chan error
}

// Serve serves dir over HTTP on addr (the lab gives 198.18.0.1:8480;
// "127.0.0.1:0" picks a free port) until ctx ends. It returns once the
// server listens. Only GET and HEAD are answered, no name that starts with
// a dot (Build's temporary files), and never "not modified".
func Serve(ctx context.Context, addr, dir string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("repo: serve %s: %w", dir, err)
	}
	files := http.FileServer(http.Dir(dir))
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Method != http.MethodGet && r.Method != http.MethodHead:
				http.Error(w, "GET or HEAD only", http.StatusMethodNotAllowed)
			case strings.Contains(path.Clean("/"+r.URL.Path), "/."):
				http.NotFound(w, r)
			default:
				// Never "not modified" by time: Build can replace InRelease
				// within the second apt last fetched it (the modification
				// time HTTP sends has whole seconds), and apt would keep the
				// old index for good. apt fetches a changed Packages by the
				// hash the new InRelease lists.
				r.Header.Del("If-Modified-Since")
				files.ServeHTTP(w, r)
			}
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	s := &Server{URL: "http://" + ln.Addr().String() + "/", done: make(chan error, 1)}
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut) //nolint:errcheck // Wait reports how Serve ended
	}()
	return s, nil
}

// Wait waits until the server stopped (its context ended) and returns
// why it stopped if not for that.
func (s *Server) Wait() error {
	return <-s.done
}
