package selection

import (
	"io"
	"strings"
	"testing"

	"github.com/sglroute/sglroute/internal/registry"
)

func TestRetryGetsItsOwnBodyAndOpenBodiesAreNotRecycled(t *testing.T) {
	const body = `{"prompt":"the original prompt"}`
	r := chatRequest("", "")
	r.Body = io.NopCloser(strings.NewReader(body))
	r.URL.Path = "/v1/completions"
	st := NewRequest()
	if err := st.ReadBody(r, DefaultMaxBodySize); err != nil || st.ParseErr != nil {
		t.Fatal(err, st.ParseErr)
	}
	st.Attach(r)
	first := r.Body

	// Attempt 1 went to a worker; its transport read half of the body and
	// has not closed it yet when the retry starts.
	w := registry.WorkerFor(t.Name())
	w.Acquire()
	st.lease.Hold(w)
	half := make([]byte, len(body)/2)
	if _, err := io.ReadFull(first, half); err != nil {
		t.Fatal(err)
	}
	if requestFor(r, DefaultMaxBodySize) != st {
		t.Fatal("retry did not find the request's state")
	}
	if r.Body == first {
		t.Fatal("the retry reuses the first attempt's reader")
	}
	if got, _ := io.ReadAll(r.Body); string(got) != body {
		t.Fatalf("retry body %q", got)
	}
	_ = r.Body.Close()

	// The request ends while attempt 1's reader is still open: its bytes
	// must not be handed to the next request.
	st.Finish()
	next := NewRequest()
	other := chatRequest("", "")
	other.Body = io.NopCloser(strings.NewReader(strings.Repeat("X", len(body))))
	if err := next.ReadBody(other, DefaultMaxBodySize); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(first)
	if string(half)+string(rest) != body {
		t.Fatalf("an open body was overwritten: %q", string(half)+string(rest))
	}
	if w.Load() != 0 {
		t.Fatalf("load %d after Finish", w.Load())
	}
	_ = first.Close()
	next.Finish()
}

func TestFinishRecyclesClosedBodies(t *testing.T) {
	r := chatRequest("s", "q")
	st := NewRequest()
	if err := st.ReadBody(r, DefaultMaxBodySize); err != nil {
		t.Fatal(err)
	}
	st.Attach(r)
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		t.Fatal(err)
	}
	_ = r.Body.Close()
	_ = r.Body.Close() // closing twice must not count twice
	if n := st.openBodies.Load(); n != 0 {
		t.Fatalf("open bodies = %d after close", n)
	}
	bp := st.bufp
	st.Finish()
	if st.bufp != nil || bp == nil {
		t.Fatal("a fully closed request kept its buffer")
	}
}
