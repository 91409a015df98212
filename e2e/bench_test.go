package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

var completion = []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"length"}],"usage":{"prompt_tokens":2048,"completion_tokens":1,"total_tokens":2049}}`)

func fixedCompletion(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(completion)
}

// BenchmarkGateway measures the gateway's overhead end to end: chat
// completions with an 8 KiB shared system prompt through an in-process
// Caddy to 4 minimal backends that drain the body and answer a fixed
// completion, so the figure is the proxy's own cost. Compare each variant
// with round_robin, Caddy's own policy, measured in the same run.
//
//	go test -run '^$' -bench Gateway -benchtime 3s ./e2e
func BenchmarkGateway(b *testing.B) {
	system := strings.Repeat("You are a careful assistant who answers in one line. ", 8192/53)
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i], _ = json.Marshal(map[string]any{
			"model": "sim-model", "max_tokens": 1,
			"messages": []map[string]string{
				{"role": "system", "content": system},
				{"role": "user", "content": fmt.Sprintf("question number %d", i)},
			},
		})
	}
	variants := []struct{ name, site string }{
		{"direct", ""},
		{"round_robin", "reverse_proxy %s {\n lb_policy round_robin\n}"},
		{"sgl_cache_aware", "reverse_proxy %s {\n lb_policy sgl_cache_aware\n}"},
		{"sglroute+sgl_cache_aware", "sglroute\nreverse_proxy %s {\n lb_policy sgl_cache_aware\n}"},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			addrs := make([]string, 4)
			for i := range addrs {
				srv := httptest.NewServer(http.HandlerFunc(fixedCompletion))
				defer srv.Close()
				addrs[i] = strings.TrimPrefix(srv.URL, "http://")
			}
			url := "http://" + addrs[0]
			if v.site != "" {
				g := &gateway{t: b, port: freePort(b)}
				g.url = fmt.Sprintf("http://127.0.0.1:%d", g.port)
				g.load(fmt.Sprintf(v.site, strings.Join(addrs, " ")))
				defer stopCaddy(b)
				url = g.url
			}
			tr := &http.Transport{MaxIdleConnsPerHost: 64}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			b.SetBytes(int64(len(bodies[0])))
			b.ReportAllocs()
			b.ResetTimer()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					resp, err := c.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(bodies[i%len(bodies)]))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}
