package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sglroute/sglroute/internal/registry"
	"github.com/sglroute/sglroute/selection"
)

func provisioned(t *testing.T, h *Handler) *Handler {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	if err := h.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	return h
}

func request(method, path, body string) *http.Request {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	return r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{}))
}

// nextFunc is the rest of the chain: it sees what reverse_proxy would see.
type nextFunc func(http.ResponseWriter, *http.Request) error

func (f nextFunc) ServeHTTP(w http.ResponseWriter, r *http.Request) error { return f(w, r) }

func TestHandlerParsesOnceAndReleases(t *testing.T) {
	h := provisioned(t, &Handler{})
	body := `{"model":"m","prompt":"hello there","stream":true}`
	w := registry.WorkerFor(t.Name())
	var seen string
	next := nextFunc(func(_ http.ResponseWriter, r *http.Request) error {
		st := selection.RequestFrom(r)
		if st == nil || st.ParseErr != nil {
			t.Fatalf("no parsed request in the context: %+v", st)
		}
		if string(st.Parsed.Text) != "hello there" || !st.Parsed.Stream || string(st.Parsed.Model) != "m" {
			t.Errorf("parsed %q stream=%v model=%q", st.Parsed.Text, st.Parsed.Stream, st.Parsed.Model)
		}
		b, _ := io.ReadAll(r.Body)
		seen = string(b)
		if r.ContentLength != int64(len(body)) {
			t.Errorf("ContentLength %d, want %d", r.ContentLength, len(body))
		}
		// What a policy does when it selects a worker.
		w.Acquire()
		st.Lease().Hold(w)
		panic(http.ErrAbortHandler) // the client went away mid-stream
	})
	func() {
		defer func() { _ = recover() }()
		_ = h.ServeHTTP(httptest.NewRecorder(), request(http.MethodPost, "/v1/completions", body), next)
	}()
	if seen != body {
		t.Errorf("upstream body %q, want %q", seen, body)
	}
	if l := w.Load(); l != 0 {
		t.Errorf("worker load %d after an aborted request, want 0", l)
	}
}

func TestHandlerRejectsBadBodies(t *testing.T) {
	h := provisioned(t, &Handler{MaxBodySize: 64})
	never := nextFunc(func(http.ResponseWriter, *http.Request) error {
		t.Error("a bad request reached the upstream")
		return nil
	})
	for _, c := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/v1/chat/completions", `{"messages":`, 400, "invalid_json"},
		{"/generate", `{"text":"` + strings.Repeat("x", 100) + `"}`, 413, "request_too_large"},
	} {
		rec := httptest.NewRecorder()
		if err := h.ServeHTTP(rec, request(http.MethodPost, c.path, c.body), never); err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct{ Type, Code, Message string }
		}
		if rec.Code != c.status || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error.Code != c.code || e.Error.Message == "" {
			t.Errorf("%s: %d %s", c.path, rec.Code, rec.Body)
		}
	}
}

func TestHandlerPassesOtherRequestsThrough(t *testing.T) {
	h := provisioned(t, &Handler{MaxBodySize: 8})
	for _, r := range []*http.Request{
		request(http.MethodGet, "/v1/chat/completions", ""),
		request(http.MethodPost, "/v1/embeddings", `{"input": "not parsed, and longer than the cap"}`),
	} {
		called := false
		next := nextFunc(func(_ http.ResponseWriter, r *http.Request) error {
			called = true
			if selection.RequestFrom(r) != nil {
				t.Errorf("%s %s was parsed", r.Method, r.URL.Path)
			}
			return nil
		})
		if err := h.ServeHTTP(httptest.NewRecorder(), r, next); err != nil || !called {
			t.Errorf("%s %s: err %v, passed on %v", r.Method, r.URL.Path, err, called)
		}
	}
}

func TestHandlerCaddyfile(t *testing.T) {
	var h Handler
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("sglroute {\n max_body_size 2MiB\n}")); err != nil {
		t.Fatal(err)
	}
	if h.MaxBodySize != 2<<20 {
		t.Errorf("max_body_size = %d", h.MaxBodySize)
	}
	for _, bad := range []string{
		"sglroute extra",
		"sglroute {\n bogus\n}",
		"sglroute {\n max_body_size\n}",
		"sglroute {\n max_body_size huge\n}",
		"sglroute {\n max_body_size 1MiB 2MiB\n}",
		"sglroute {\n openai_errors maybe\n}",
		"sglroute {\n openai_errors\n}",
	} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	if err := (&Handler{MaxBodySize: -1}).Validate(); err == nil {
		t.Error("negative max_body_size validated")
	}
}

func TestHandlerAnswersGatewayErrorsInOpenAIShape(t *testing.T) {
	failing := nextFunc(func(http.ResponseWriter, *http.Request) error {
		return caddyhttp.Error(http.StatusServiceUnavailable, errors.New("no upstreams available"))
	})
	h := provisioned(t, &Handler{})
	rec := httptest.NewRecorder()
	if err := h.ServeHTTP(rec, request(http.MethodPost, "/generate", `{"text":"hi"}`), failing); err != nil {
		t.Fatalf("error passed on: %v", err)
	}
	var e struct {
		Error struct{ Type, Code, Message string }
	}
	if rec.Code != 503 || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error.Code != "no_available_workers" || e.Error.Type != "server_error" {
		t.Errorf("got %d %s", rec.Code, rec.Body)
	}

	off := false
	h = provisioned(t, &Handler{OpenAIErrors: &off})
	if err := h.ServeHTTP(httptest.NewRecorder(), request(http.MethodPost, "/generate", `{"text":"hi"}`), failing); err == nil {
		t.Error("openai_errors off swallowed the error")
	}
	// Errors that are not the proxy's own are left alone.
	other := nextFunc(func(http.ResponseWriter, *http.Request) error { return errors.New("boom") })
	h = provisioned(t, &Handler{})
	if err := h.ServeHTTP(httptest.NewRecorder(), request(http.MethodPost, "/generate", `{"text":"hi"}`), other); err == nil {
		t.Error("a non-proxy error was swallowed")
	}
}
