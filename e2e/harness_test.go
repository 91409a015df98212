// Package e2e runs sglroute inside a real, in-process Caddy in front of
// simulated SGLang workers. Caddy is a process-wide singleton, so the tests
// in this package run one after another and each loads its own config.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/sglroute/sglroute"
	"github.com/sglroute/sglroute/sim"
)

// freePort asks the OS for a free loopback port.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// fleet starts n simulated workers and stops them when the test ends.
func fleet(t *testing.T, n int, cfg sim.Config) []*sim.Server {
	t.Helper()
	servers, err := sim.StartFleet(n, cfg, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range servers {
			s.Close()
		}
	})
	return servers
}

func dials(servers []*sim.Server) string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	return strings.Join(addrs, " ")
}

// gateway is an in-process Caddy serving one site on a free port.
type gateway struct {
	t    testing.TB
	port int
	url  string
}

const globalOptions = `{
	admin off
	persist_config off
	auto_https off
	skip_install_trust
	grace_period 5s
	log default {
		level ERROR
	}
}
`

// startGateway loads a site block (the body inside `http://127.0.0.1:PORT { }`).
func startGateway(t *testing.T, site string) *gateway {
	t.Helper()
	g := &gateway{t: t, port: freePort(t)}
	g.url = fmt.Sprintf("http://127.0.0.1:%d", g.port)
	g.load(site)
	t.Cleanup(func() { stopCaddy(t) })
	return g
}

func stopCaddy(t testing.TB) {
	if err := caddy.Stop(); err != nil {
		t.Errorf("stopping caddy: %v", err)
	}
}

// load adapts and (re)loads a config, as `caddy reload` does.
func (g *gateway) load(site string) {
	g.t.Helper()
	cf := caddyfile.Format([]byte(globalOptions + fmt.Sprintf("http://127.0.0.1:%d {\n%s\n}\n", g.port, site)))
	js, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
	if err != nil {
		g.t.Fatalf("adapting Caddyfile: %v\n%s", err, cf)
	}
	for _, w := range warnings {
		g.t.Logf("caddyfile warning: %s", w)
	}
	if err := caddy.Load(js, true); err != nil {
		g.t.Fatalf("loading config: %v\n%s", err, cf)
	}
	// The old config's server closes its idle keep-alive connections on
	// the way out; a POST on one of them would fail with EOF (net/http does
	// not retry non-idempotent requests), so start from fresh connections.
	client.CloseIdleConnections()
}

var client = &http.Client{Timeout: 60 * time.Second}

type chatResponse struct {
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// chat sends one chat completion and returns the serving worker's name.
func (g *gateway) chat(system, question string) (worker string, status int, body []byte) {
	g.t.Helper()
	req, _ := json.Marshal(map[string]any{
		"model":      "sim-model",
		"max_tokens": 4,
		"messages": []map[string]string{
			{"role": "system", "content": system},
			{"role": "user", "content": question},
		},
	})
	resp, err := client.Post(g.url+"/v1/chat/completions", "application/json", bytes.NewReader(req))
	if err != nil {
		g.t.Fatalf("chat request: %v", err)
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(resp.Body)
	return resp.Header.Get("X-SGLSim-Worker"), resp.StatusCode, body
}

// clusterCacheRatio is cached over prompt tokens summed over the workers'
// own counters.
func clusterCacheRatio(servers []*sim.Server) (ratio float64, prompt, cached int64) {
	for _, s := range servers {
		st := s.Worker.Stats()
		prompt += st.PromptTokens
		cached += st.CachedTokens
	}
	if prompt == 0 {
		return 0, 0, 0
	}
	return float64(cached) / float64(prompt), prompt, cached
}

// eventually waits, within a deadline, for cond to hold. Releases that
// happen after a response is complete (a handler's deferred cleanup) have
// no event a client can wait on, so the test polls for them.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}
