package selection

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"
)

// BenchmarkSelect measures sgl_cache_aware's Select as reverse_proxy calls
// it after the sglroute handler parsed the body: a warm prompt (cache hit,
// the common case) and a stream of new prompts (miss + insert), with 4 and
// 64 workers, on an 8 KiB chat prompt.
func BenchmarkSelect(b *testing.B) {
	// Baseline: one comparison of an 8 KiB prompt with its stored copy.
	b.Run("baseline_bytes_equal_8KiB", func(b *testing.B) {
		x := []byte(strings.Repeat("You are a careful assistant. ", 8192/29))
		y := append([]byte(nil), x...)
		b.SetBytes(int64(len(x)))
		for i := 0; i < b.N; i++ {
			if !bytes.Equal(x, y) {
				b.Fatal("differ")
			}
		}
	})
	for _, workers := range []int{4, 64} {
		for _, kind := range []string{"hit", "miss"} {
			b.Run(fmt.Sprintf("%s/workers=%d", kind, workers), func(b *testing.B) {
				p := &CacheAware{Pool: b.Name()}
				ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
				defer cancel()
				if err := p.Provision(ctx); err != nil {
					b.Fatal(err)
				}
				defer p.Cleanup()
				p.logger = zap.NewNop()
				pool := make(reverseproxy.UpstreamPool, workers)
				for i := range pool {
					pool[i] = &reverseproxy.Upstream{Dial: fmt.Sprintf("%s-%d:1", b.Name(), i), Host: new(reverseproxy.Host)}
				}
				system := strings.Repeat("You are a careful assistant. ", 8192/29)
				mk := func(q string) (*http.Request, *Request) {
					body, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{
						{"role": "system", "content": system}, {"role": "user", "content": q}}})
					r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(string(body)))
					r = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{}))
					st := NewRequest()
					if err := st.ReadBody(r, DefaultMaxBodySize); err != nil || st.ParseErr != nil {
						b.Fatal(err, st.ParseErr)
					}
					st.Attach(r)
					return r, st
				}
				if kind == "hit" {
					r, st := mk("what is the capital of France?")
					p.Select(pool, r, nil)
					b.SetBytes(int64(len(st.Parsed.Text)))
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						st.lease.Release()
						st.ntried = 0
						p.Select(pool, r, nil)
					}
					b.StopTimer()
					st.Finish()
					return
				}
				reqs := make([]*http.Request, 1024)
				states := make([]*Request, len(reqs))
				for i := range reqs {
					reqs[i], states[i] = mk(fmt.Sprintf("question %d: %s", i, strings.Repeat("x", i%64)))
					// a distinct system prompt per request: a true cold miss
					states[i].Parsed.Text = append([]byte(fmt.Sprintf("%08d", i)), states[i].Parsed.Text...)
				}
				b.SetBytes(int64(len(states[0].Parsed.Text)))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					st := states[i%len(states)]
					st.lease.Release()
					st.ntried = 0
					p.Select(pool, reqs[i%len(reqs)], nil)
				}
				b.StopTimer()
				for _, st := range states {
					st.lease.Release()
				}
			})
		}
	}
}
