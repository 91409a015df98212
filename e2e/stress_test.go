package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglroute/sglroute/internal/registry"
	"github.com/sglroute/sglroute/sim"
)

// TestLoadAccountingUnderStress mixes streams and plain requests, client
// aborts at random points and a worker that fails a third of its requests
// (retried elsewhere), 16 at a time. Whatever happened to each request,
// every worker's in-flight count must come back to exactly zero: no slot
// leaked, none released twice.
func TestLoadAccountingUnderStress(t *testing.T) {
	servers := fleet(t, 3, sim.Config{CharsPerToken: charsPerToken, DecodePerToken: 200 * time.Microsecond, CacheTokens: 4096})
	flaky, err := sim.Start(sim.Config{Name: "flaky", CharsPerToken: charsPerToken, ErrorRate: 0.33, ErrorStatus: 503, Seed: 7,
		DecodePerToken: 200 * time.Microsecond}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { flaky.Close() })
	servers = append(servers, flaky)

	g := startGateway(t, `sglroute
	reverse_proxy `+dials(servers)+` {
		lb_policy sgl_cache_aware {
			balance_abs_threshold 4
			balance_rel_threshold 1.2
		}
		lb_retries 3
		lb_retry_match {
			expression `+"`{rp.status_code} >= 500`"+`
		}
		flush_interval -1
	}`)

	const requests, concurrency = 240, 16
	rng := rand.New(rand.NewPCG(1, 2))
	type plan struct {
		stream bool
		abort  int // abort after this many SSE lines; -1 never
		group  int
	}
	plans := make([]plan, requests)
	for i := range plans {
		plans[i] = plan{stream: rng.IntN(2) == 0, abort: -1, group: rng.IntN(6)}
		if plans[i].stream && rng.IntN(3) == 0 {
			plans[i].abort = rng.IntN(8)
		}
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
		next     = make(chan int)
	)
	for c := 0; c < concurrency; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if msg := runPlanned(g, plans[i].stream, plans[i].abort, plans[i].group); msg != "" {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("request %d: %s", i, msg))
					mu.Unlock()
				}
			}
		}()
	}
	for i := range plans {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	for _, s := range servers {
		w := registry.WorkerFor(s.Addr)
		eventually(t, s.Worker.Name()+"'s gateway load to return to 0", func() bool { return w.Load() == 0 })
		eventually(t, s.Worker.Name()+"'s in-flight requests to end", func() bool { return s.Worker.Stats().InFlight == 0 })
	}
	var served int64
	for _, s := range servers {
		served += s.Worker.Stats().Requests
	}
	t.Logf("%d requests, %d reached a worker (retries included); flaky worker answered %d with errors",
		requests, served, flaky.Worker.Stats().Errors)
}

// runPlanned sends one request as planned and returns what went wrong, if
// anything. Aborted streams are expected to end early; everything else must
// succeed, since failures on the flaky worker are retried elsewhere.
func runPlanned(g *gateway, stream bool, abort, group int) string {
	body, _ := json.Marshal(map[string]any{
		"model": "sim-model", "stream": stream, "max_tokens": 16,
		"messages": []map[string]string{
			{"role": "system", "content": fmt.Sprintf("group %d %s", group, strings.Repeat("context ", 50))},
			{"role": "user", "content": "go"},
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url+"/v1/chat/completions", bytes.NewReader(body))
	resp, err := client.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("status %d: %s", resp.StatusCode, b)
	}
	if !stream {
		_, err := io.Copy(io.Discard, resp.Body)
		if err != nil {
			return err.Error()
		}
		return ""
	}
	rd := bufio.NewReader(resp.Body)
	lines := 0
	for {
		line, err := rd.ReadString('\n')
		if strings.HasPrefix(line, "data: ") {
			lines++
			if strings.TrimSpace(line) == "data: [DONE]" {
				return ""
			}
			if abort >= 0 && lines > abort {
				cancel() // the client goes away mid-stream
				return ""
			}
		}
		if err != nil {
			return "stream ended without [DONE]: " + err.Error()
		}
	}
}
