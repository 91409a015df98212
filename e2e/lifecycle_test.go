package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/sglroute/sglroute/internal/registry"
	"github.com/sglroute/sglroute/sim"
)

func TestReloadKeepsTree(t *testing.T) {
	servers := fleet(t, 4, simConfig())
	site := func(threshold string) string {
		return `sglroute
		reverse_proxy ` + dials(servers) + ` {
			lb_policy sgl_cache_aware {
				pool reload_test
				cache_threshold ` + threshold + `
			}
		}`
	}
	g := startGateway(t, site("0.3"))
	home := map[int]string{}
	for _, p := range sharedPrefix.Generate() {
		if _, ok := home[p.Group]; ok {
			continue
		}
		w, status, body := g.chat(p.System, p.Question)
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, body)
		}
		home[p.Group] = w
	}

	// Reload with a changed option, as `caddy reload` does.
	g.load(site("0.35"))
	_, prompt0, cached0 := clusterCacheRatio(servers)

	same := 0
	for g2 := 0; g2 < sharedPrefix.Groups; g2++ {
		var p = sharedPrefix.Generate()[0]
		for _, q := range sharedPrefix.Generate() {
			if q.Group == g2 {
				p = q
				break
			}
		}
		w, status, body := g.chat(p.System, "a question asked after the reload")
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, body)
		}
		if w == home[g2] {
			same++
		}
	}
	// A fresh tree would send each group to a random idle worker: about a
	// quarter would land at home by chance.
	if same != sharedPrefix.Groups {
		t.Errorf("after reload %d of %d groups went back to the worker holding their prefix", same, sharedPrefix.Groups)
	}
	// The workers' own counters: after the reload the prompts hit their
	// caches (a fresh tree would give about a quarter of this).
	_, prompt1, cached1 := clusterCacheRatio(servers)
	ratio := float64(cached1-cached0) / float64(prompt1-prompt0)
	t.Logf("cached-token ratio after the reload: %.3f", ratio)
	if ratio < 0.8 {
		t.Errorf("cached-token ratio after the reload = %.3f, want >= 0.8", ratio)
	}
}

func TestUnhealthyWorkerIsSkipped(t *testing.T) {
	servers := fleet(t, 3, sim.Config{CharsPerToken: charsPerToken})
	// The sick worker fails its health checks and every request it gets, so
	// a request that reached it would fail unless retried elsewhere.
	sick, err := sim.Start(sim.Config{Name: "sick", CharsPerToken: charsPerToken, ErrorRate: 1, ErrorStatus: 503}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sick.Close() })
	sick.Worker.SetUnhealthy(true)
	servers = append([]*sim.Server{sick}, servers...)

	g := startGateway(t, `sglroute
	reverse_proxy `+dials(servers)+` {
		lb_policy sgl_cache_aware
		lb_retries 3
		lb_retry_match {
			expression `+"`{rp.status_code} >= 500`"+`
		}
		health_uri /health
		health_interval 50ms
		fail_duration 1m
		max_fails 1
		unhealthy_status 5xx
	}`)
	for i := 0; i < 40; i++ {
		w, status, body := g.chat(fmt.Sprintf("system prompt %d %s", i, strings.Repeat("x", 200)), "q")
		if status != http.StatusOK {
			t.Fatalf("request %d: status %d from %q: %s", i, status, w, body)
		}
		if w == sick.Worker.Name() {
			t.Fatalf("request %d was answered by the unhealthy worker", i)
		}
	}
	if n := sick.Worker.Stats().Requests; n > 3 {
		t.Errorf("unhealthy worker received %d of 40 requests; it should be skipped", n)
	}
	for _, s := range servers {
		if l := registry.WorkerFor(s.Addr).Load(); l != 0 {
			t.Errorf("%s: load %d after all requests ended", s.Worker.Name(), l)
		}
	}
}

func TestDeadWorkerIsRetriedElsewhere(t *testing.T) {
	servers := fleet(t, 3, sim.Config{CharsPerToken: charsPerToken})
	dead := servers[0].Addr
	servers[0].Close()
	g := startGateway(t, `sglroute
	reverse_proxy `+dead+` `+servers[1].Addr+` `+servers[2].Addr+` {
		lb_policy sgl_cache_aware
		lb_retries 2
	}`)
	for i := 0; i < 30; i++ {
		if w, status, body := g.chat(fmt.Sprintf("prompt %d", i), "q"); status != http.StatusOK {
			t.Fatalf("request %d: status %d from %q: %s", i, status, w, body)
		}
	}
	if l := registry.WorkerFor(dead).Load(); l != 0 {
		t.Errorf("dead worker load %d, want 0", l)
	}
}

// streamUntilFirstChunk starts a streaming chat and returns once the first
// SSE event has arrived.
func startStream(t *testing.T, g *gateway, ctx context.Context) (*http.Response, *bufio.Reader) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"model": "sim-model", "stream": true, "max_tokens": 200,
		"messages": []map[string]string{{"role": "user", "content": "tell me a long story"}},
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url+"/v1/chat/completions", bytes.NewReader(body))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream status %d", resp.StatusCode)
	}
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first stream line %q, %v", line, err)
	}
	return resp, rd
}

func TestStreamHoldsLoadUntilItEnds(t *testing.T) {
	servers := fleet(t, 1, sim.Config{CharsPerToken: charsPerToken, DecodePerToken: 2 * time.Millisecond})
	w := registry.WorkerFor(servers[0].Addr)
	g := startGateway(t, `sglroute
	reverse_proxy `+servers[0].Addr+` {
		lb_policy sgl_cache_aware
	}`)

	t.Run("completes", func(t *testing.T) {
		resp, rd := startStream(t, g, context.Background())
		if l := w.Load(); l != 1 {
			t.Errorf("load mid-stream = %d, want 1", l)
		}
		var last string
		for {
			line, err := rd.ReadString('\n')
			if strings.HasPrefix(line, "data: ") {
				last = line
			}
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		if strings.TrimSpace(last) != "data: [DONE]" {
			t.Errorf("stream ended with %q", last)
		}
		eventually(t, "load to drop after the stream", func() bool { return w.Load() == 0 })
	})

	t.Run("client_abort", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		resp, _ := startStream(t, g, ctx)
		if l := w.Load(); l != 1 {
			t.Errorf("load mid-stream = %d, want 1", l)
		}
		cancel()
		resp.Body.Close()
		eventually(t, "load to drop after the client went away", func() bool { return w.Load() == 0 })
		eventually(t, "the worker to stop generating", func() bool { return servers[0].Worker.Stats().InFlight == 0 })
	})
}

type openAIError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

func TestBadRequestsGetOpenAIErrors(t *testing.T) {
	servers := fleet(t, 1, sim.Config{CharsPerToken: charsPerToken})
	g := startGateway(t, `sglroute {
		max_body_size 1KiB
	}
	reverse_proxy `+servers[0].Addr+` {
		lb_policy sgl_cache_aware
	}`)
	cases := []struct {
		path, body string
		status     int
		code       string
	}{
		{"/v1/chat/completions", `{"messages": [`, 400, "invalid_json"},
		{"/v1/completions", `{"prompt": "x"} trailing`, 400, "invalid_json"},
		{"/generate", `{"text": 12}`, 400, "invalid_json"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 2000) + `"}]}`, 413, "request_too_large"},
	}
	for _, c := range cases {
		resp, err := client.Post(g.url+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var e openAIError
		decErr := json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != c.status || decErr != nil || e.Error.Code != c.code || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
			t.Errorf("%s %.40q: status %d, body %+v (%v); want %d with code %s", c.path, c.body, resp.StatusCode, e, decErr, c.status, c.code)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s: Content-Type %q", c.path, ct)
		}
	}
	if n := servers[0].Worker.Stats().Requests; n != 0 {
		t.Errorf("the worker received %d bad requests", n)
	}
	// Other paths pass through untouched, whatever their body.
	resp, err := client.Get(g.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/models through the gateway: %d", resp.StatusCode)
	}
}

func TestExampleCaddyfileIsValid(t *testing.T) {
	src, err := os.ReadFile("../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	js, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(src, map[string]any{"filename": "Caddyfile.example"})
	if err != nil {
		t.Fatalf("adapting: %v", err)
	}
	var cfg caddy.Config
	if err := json.Unmarshal(js, &cfg); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&cfg); err != nil {
		t.Fatalf("Caddyfile.example does not validate: %v", err)
	}
	for _, want := range []string{`"policy":"sgl_cache_aware"`, `"handler":"sglroute"`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("adapted config lacks %s", want)
		}
	}
}

func TestFullWorkerIsSkipped(t *testing.T) {
	// unhealthy_request_count 1: a worker serving one request is full.
	servers := fleet(t, 2, sim.Config{CharsPerToken: charsPerToken, DecodePerToken: 2 * time.Millisecond})
	g := startGateway(t, `sglroute
	reverse_proxy `+dials(servers)+` {
		lb_policy sgl_cache_aware {
			debug
		}
		unhealthy_request_count 1
	}`)
	// Warm the prefix on one worker, then keep that worker busy with a
	// stream of the same prompt.
	w, status, _ := g.chat("", "tell me a long story")
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, _ := startStream(t, g, ctx)
	defer resp.Body.Close()
	if got := resp.Header.Get("X-SGLSim-Worker"); got != w {
		t.Fatalf("the warm prompt streamed from %s, want %s (its cache holder)", got, w)
	}
	// The same prompt again: its cache holder is full, so the other one.
	other, status, body := g.chat("", "tell me a long story")
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	if other == w {
		t.Errorf("request went to %s, which is at its max_requests", w)
	}
}

func TestNoWorkerGivesOpenAIError(t *testing.T) {
	dead := fmt.Sprintf("127.0.0.1:%d", freePort(t)) // nothing listens there
	g := startGateway(t, `sglroute
	reverse_proxy `+dead+` {
		lb_policy sgl_cache_aware
	}`)
	resp, err := client.Post(g.url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e openAIError
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != http.StatusBadGateway ||
		e.Error.Type != "server_error" || e.Error.Code != "upstream_error" {
		t.Errorf("status %d, body %+v (%v); want 502 with an OpenAI error", resp.StatusCode, e, err)
	}
	if strings.Contains(e.Error.Message, "127.0.0.1") {
		t.Errorf("the client-facing message leaks a worker address: %q", e.Error.Message)
	}
	if l := registry.WorkerFor(dead).Load(); l != 0 {
		t.Errorf("dead worker load %d", l)
	}
}
