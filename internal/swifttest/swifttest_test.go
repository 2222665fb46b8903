package swifttest

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// The store answers as Swift does: tempauth logs in, a container takes an
// object, and a stopped proxy refuses connections until started again.
func TestStartPutGetStopProxy(t *testing.T) {
	s := Start(t)
	t.Logf("Swift started in %s", s.StartTime.Round(time.Millisecond))
	if again := Start(t); again != s {
		t.Fatal("a second Start in the process started another Swift")
	}
	c := s.NewContainer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if code, body, err := s.Do(ctx, http.MethodPut, c.Name+"/a/b.log", nil, []byte("hello")); err != nil || code != http.StatusCreated {
		t.Fatalf("put: %d %s %v", code, body, err)
	}
	if got := string(s.Get(t, c.Name, "a/b.log")); got != "hello" {
		t.Fatalf("get: %q", got)
	}
	if got := s.List(t, c.Name, "a/"); len(got) != 1 || got[0] != "a/b.log" {
		t.Fatalf("list: %q", got)
	}
	s.StopProxy(t)
	if _, err := s.Token(ctx); err == nil {
		t.Fatal("tempauth answered with the proxy stopped")
	}
	s.StartProxy(t)
	if got := string(s.Get(t, c.Name, "a/b.log")); got != "hello" {
		t.Fatalf("get after restart: %q", got)
	}
}
