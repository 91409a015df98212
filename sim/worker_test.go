package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func startT(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func post(t *testing.T, url string, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func decodeT[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	for _, block := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
		if !strings.HasPrefix(block, "data: ") {
			t.Fatalf("bad SSE block %q", block)
		}
		out = append(out, strings.TrimPrefix(block, "data: "))
	}
	return out
}

type genOut struct {
	Text     string `json:"text"`
	MetaInfo struct {
		ID                  string          `json:"id"`
		PromptTokens        int             `json:"prompt_tokens"`
		CompletionTokens    int             `json:"completion_tokens"`
		CachedTokens        int             `json:"cached_tokens"`
		FinishReason        *finishReason   `json:"finish_reason"`
		E2ELatency          *float64        `json:"e2e_latency"`
		InputTokenLogprobs  [][]interface{} `json:"input_token_logprobs"`
		OutputTokenLogprobs [][]interface{} `json:"output_token_logprobs"`
	} `json:"meta_info"`
}

func generate(t *testing.T, s *Server, text string, maxNew int) genOut {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"text": text, "sampling_params": map[string]any{"max_new_tokens": maxNew}})
	resp, b := post(t, s.URL+"/generate", string(body))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return decodeT[genOut](t, b)
}

func TestGenerateCacheHits(t *testing.T) {
	s := startT(t, Config{Name: "wA", CacheTokens: 10000})
	prompt := strings.Repeat("abcd", 50) // 50 tokens
	g1 := generate(t, s, prompt, 5)
	if g1.MetaInfo.PromptTokens != 50 || g1.MetaInfo.CachedTokens != 0 || g1.MetaInfo.CompletionTokens != 5 {
		t.Fatalf("first: %+v", g1.MetaInfo)
	}
	if g1.MetaInfo.FinishReason == nil || g1.MetaInfo.FinishReason.Type != "length" || g1.MetaInfo.FinishReason.Length != 5 {
		t.Fatalf("finish_reason: %+v", g1.MetaInfo.FinishReason)
	}
	if g1.MetaInfo.E2ELatency == nil || g1.MetaInfo.ID == "" || g1.Text == "" {
		t.Fatalf("missing fields: %+v", g1)
	}
	if n := CountTokens(g1.Text, 4); n == 0 {
		t.Fatal("empty text")
	}
	g2 := generate(t, s, prompt, 5)
	if g2.MetaInfo.CachedTokens != 50 {
		t.Fatalf("identical prompt cached %d, want 50", g2.MetaInfo.CachedTokens)
	}
	if g2.Text != g1.Text {
		t.Fatalf("output not deterministic: %q vs %q", g1.Text, g2.Text)
	}
	// shared prefix of 40 tokens
	g3 := generate(t, s, strings.Repeat("abcd", 40)+strings.Repeat("wxyz", 10), 1)
	if g3.MetaInfo.CachedTokens != 40 || g3.MetaInfo.PromptTokens != 50 {
		t.Fatalf("shared prefix: %+v", g3.MetaInfo)
	}
	// flush
	resp, _ := post(t, s.URL+"/flush_cache", "")
	if resp.StatusCode != 200 {
		t.Fatalf("flush status %d", resp.StatusCode)
	}
	if g := generate(t, s, prompt, 1); g.MetaInfo.CachedTokens != 0 {
		t.Fatalf("after flush cached %d", g.MetaInfo.CachedTokens)
	}
	st := s.Worker.Stats()
	if st.Requests != 4 || st.PromptTokens != 200 || st.CachedTokens != 90 || st.CompletionTokens != 12 || st.InFlight != 0 || st.PeakInFlight < 1 || st.Errors != 0 {
		t.Fatalf("stats %+v", st)
	}
	if st.CacheSize != 50 {
		t.Fatalf("cache size %d", st.CacheSize)
	}
	s.Worker.FlushCache()
	if s.Worker.Stats().CacheSize != 0 {
		t.Fatal("FlushCache did not empty")
	}
}

func TestNoCacheConfig(t *testing.T) {
	s := startT(t, Config{})
	generate(t, s, "hello world", 1)
	if g := generate(t, s, "hello world", 1); g.MetaInfo.CachedTokens != 0 {
		t.Fatalf("cache disabled but cached %d", g.MetaInfo.CachedTokens)
	}
}

func TestCacheLRUOverHTTP(t *testing.T) {
	s := startT(t, Config{CacheTokens: 20, CharsPerToken: 1})
	a, b, c := "aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc"
	generate(t, s, a, 1)
	generate(t, s, b, 1)
	generate(t, s, a, 1) // refresh a
	generate(t, s, c, 1) // evicts b
	if g := generate(t, s, a, 1); g.MetaInfo.CachedTokens != 10 {
		t.Fatalf("a cached %d", g.MetaInfo.CachedTokens)
	}
	if g := generate(t, s, b, 1); g.MetaInfo.CachedTokens != 0 {
		t.Fatalf("b cached %d, want 0 (evicted)", g.MetaInfo.CachedTokens)
	}
}

func TestGenerateInputIDsAndLogprobs(t *testing.T) {
	s := startT(t, Config{CacheTokens: 1000})
	_, b := post(t, s.URL+"/generate", `{"input_ids":[1,2,3,4],"sampling_params":{"max_new_tokens":2},"return_logprob":true}`)
	g := decodeT[genOut](t, b)
	if g.MetaInfo.PromptTokens != 4 || len(g.MetaInfo.InputTokenLogprobs) != 4 || len(g.MetaInfo.OutputTokenLogprobs) != 2 {
		t.Fatalf("%s", b)
	}
	first := g.MetaInfo.InputTokenLogprobs[0]
	if len(first) != 3 || first[0] != nil || first[1].(float64) != 1 || first[2] != nil {
		t.Fatalf("input logprob entry %v", first)
	}
	if _, ok := g.MetaInfo.OutputTokenLogprobs[0][0].(float64); !ok {
		t.Fatalf("output logprob %v", g.MetaInfo.OutputTokenLogprobs[0])
	}
	_, b = post(t, s.URL+"/generate", `{"input_ids":[1,2,3,9]}`)
	g = decodeT[genOut](t, b)
	if g.MetaInfo.CachedTokens != 3 || g.MetaInfo.CompletionTokens != DefaultMaxTokens {
		t.Fatalf("%s", b)
	}
	// batch
	resp, b := post(t, s.URL+"/generate", `{"text":["one","two three"],"sampling_params":{"max_new_tokens":3}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("batch %d %s", resp.StatusCode, b)
	}
	gs := decodeT[[]genOut](t, b)
	if len(gs) != 2 || gs[1].MetaInfo.PromptTokens != 3 || gs[0].MetaInfo.CompletionTokens != 3 {
		t.Fatalf("batch %s", b)
	}
}

func TestGenerateStream(t *testing.T) {
	s := startT(t, Config{Name: "ws"})
	resp, b := post(t, s.URL+"/generate", `{"text":"hello there","sampling_params":{"max_new_tokens":4},"stream":true}`)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	if resp.Header.Get("X-SGLSim-Worker") != "ws" {
		t.Fatal("missing worker header")
	}
	ev := sseEvents(t, b)
	if len(ev) != 5 || ev[4] != "[DONE]" {
		t.Fatalf("events %q", ev)
	}
	prev := ""
	for i, e := range ev[:4] {
		g := decodeT[genOut](t, []byte(e))
		if !strings.HasPrefix(g.Text, prev) || len(g.Text) <= len(prev) {
			t.Fatalf("text not cumulative: %q then %q", prev, g.Text)
		}
		prev = g.Text
		if g.MetaInfo.CompletionTokens != i+1 {
			t.Fatalf("chunk %d completion_tokens %d", i, g.MetaInfo.CompletionTokens)
		}
		if (g.MetaInfo.FinishReason != nil) != (i == 3) {
			t.Fatalf("chunk %d finish_reason %v", i, g.MetaInfo.FinishReason)
		}
	}
	nonStream := generate(t, s, "hello there", 4)
	if nonStream.Text != prev {
		t.Fatalf("stream text %q != %q", prev, nonStream.Text)
	}
}

type oaiResp struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int     `json:"index"`
		Text    *string `json:"text"`
		Message *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
	} `json:"choices"`
	Usage *Usage `json:"usage"`
}

func TestCompletions(t *testing.T) {
	s := startT(t, Config{CacheTokens: 1000, Model: "m1"})
	_, b := post(t, s.URL+"/v1/completions", `{"model":"m1","prompt":"abcdefgh","max_tokens":3}`)
	r := decodeT[oaiResp](t, b)
	if r.Object != "text_completion" || !strings.HasPrefix(r.ID, "cmpl-") || r.Model != "m1" || r.Created == 0 ||
		len(r.Choices) != 1 || r.Choices[0].Text == nil || *r.Choices[0].FinishReason != "length" {
		t.Fatalf("%s", b)
	}
	if u := r.Usage; u == nil || u.PromptTokens != 2 || u.CompletionTokens != 3 || u.TotalTokens != 5 || u.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("usage %s", b)
	}
	// array prompt joined by ' ', hits the cache for "abcdefgh"
	_, b = post(t, s.URL+"/v1/completions", `{"prompt":["abcdefgh","zz"],"max_tokens":1,"logprobs":1}`)
	r = decodeT[oaiResp](t, b)
	if r.Usage.PromptTokens != 3 || r.Usage.PromptTokensDetails.CachedTokens != 2 {
		t.Fatalf("%s", b)
	}
	if !bytes.Contains(r.Choices[0].Logprobs, []byte("token_logprobs")) {
		t.Fatalf("logprobs %s", b)
	}
	// streaming without usage
	_, b = post(t, s.URL+"/v1/completions", `{"prompt":"abc","max_tokens":3,"stream":true}`)
	ev := sseEvents(t, b)
	if len(ev) != 4 || ev[3] != "[DONE]" {
		t.Fatalf("events %q", ev)
	}
	var text string
	for i, e := range ev[:3] {
		c := decodeT[oaiResp](t, []byte(e))
		if c.Object != "text_completion" || c.Usage != nil || len(c.Choices) != 1 {
			t.Fatalf("chunk %s", e)
		}
		text += *c.Choices[0].Text
		if (c.Choices[0].FinishReason != nil) != (i == 2) {
			t.Fatalf("finish %s", e)
		}
	}
	_, b = post(t, s.URL+"/v1/completions", `{"prompt":"abc","max_tokens":3}`)
	if r := decodeT[oaiResp](t, b); *r.Choices[0].Text != text {
		t.Fatalf("stream %q vs %q", text, *r.Choices[0].Text)
	}
	// streaming with usage
	_, b = post(t, s.URL+"/v1/completions", `{"prompt":"abc","max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`)
	ev = sseEvents(t, b)
	if len(ev) != 4 || ev[3] != "[DONE]" {
		t.Fatalf("events %q", ev)
	}
	u := decodeT[oaiResp](t, []byte(ev[2]))
	if len(u.Choices) != 0 || u.Usage == nil || u.Usage.CompletionTokens != 2 || u.Usage.PromptTokensDetails.CachedTokens != 1 {
		t.Fatalf("usage chunk %s", ev[2])
	}
}

func TestChatCompletions(t *testing.T) {
	s := startT(t, Config{CacheTokens: 10000})
	sys := strings.Repeat("You are a helpful assistant. ", 20)
	body := func(user string, extra string) string {
		return fmt.Sprintf(`{"model":"x","messages":[{"role":"system","content":%q},{"role":"user","content":%q}]%s}`, sys, user, extra)
	}
	_, b := post(t, s.URL+"/v1/chat/completions", body("first question", `,"max_tokens":2`))
	r := decodeT[oaiResp](t, b)
	if r.Object != "chat.completion" || !strings.HasPrefix(r.ID, "chatcmpl-") || len(r.Choices) != 1 ||
		r.Choices[0].Message == nil || r.Choices[0].Message.Role != "assistant" || r.Choices[0].Message.Content == "" ||
		*r.Choices[0].FinishReason != "length" || r.Usage.CompletionTokens != 2 {
		t.Fatalf("%s", b)
	}
	wantPrompt := len(Tokenize(ChatTemplate([]ChatMessage{{"system", sys}, {"user", "first question"}}), 4))
	if r.Usage.PromptTokens != wantPrompt {
		t.Fatalf("prompt tokens %d, want %d", r.Usage.PromptTokens, wantPrompt)
	}
	// Different user message: the system prompt is a shared prefix.
	_, b = post(t, s.URL+"/v1/chat/completions", body("another one", `,"max_completion_tokens":1,"logprobs":true`))
	r = decodeT[oaiResp](t, b)
	sysTokens := CountTokens("<|system|>"+sys+"\n", 4)
	if c := r.Usage.PromptTokensDetails.CachedTokens; c < sysTokens-1 || c >= r.Usage.PromptTokens {
		t.Fatalf("cached %d, system prefix %d tokens, prompt %d", c, sysTokens, r.Usage.PromptTokens)
	}
	if r.Usage.CompletionTokens != 1 || !bytes.Contains(r.Choices[0].Logprobs, []byte(`"content":[{"token"`)) {
		t.Fatalf("%s", b)
	}
	// content parts
	_, b = post(t, s.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":1}`)
	if r := decodeT[oaiResp](t, b); r.Usage == nil || r.Usage.PromptTokens != CountTokens("<|user|>hi\n<|assistant|>", 4) {
		t.Fatalf("%s", b)
	}

	// streaming with usage
	_, b = post(t, s.URL+"/v1/chat/completions", body("q", `,"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}`))
	ev := sseEvents(t, b)
	if len(ev) != 6 || ev[5] != "[DONE]" {
		t.Fatalf("events %q", ev)
	}
	first := decodeT[oaiResp](t, []byte(ev[0]))
	if first.Object != "chat.completion.chunk" || first.Choices[0].Delta == nil || first.Choices[0].Delta.Role != "assistant" {
		t.Fatalf("first chunk %s", ev[0])
	}
	for i := 1; i <= 3; i++ {
		c := decodeT[oaiResp](t, []byte(ev[i]))
		if c.Choices[0].Delta.Content == nil || *c.Choices[0].Delta.Content == "" || c.Usage != nil {
			t.Fatalf("chunk %s", ev[i])
		}
		if (c.Choices[0].FinishReason != nil) != (i == 3) {
			t.Fatalf("finish %s", ev[i])
		}
	}
	u := decodeT[oaiResp](t, []byte(ev[4]))
	if len(u.Choices) != 0 || u.Usage == nil || u.Usage.CompletionTokens != 3 || u.Usage.TotalTokens != u.Usage.PromptTokens+3 {
		t.Fatalf("usage %s", ev[4])
	}
	// streaming without usage
	_, b = post(t, s.URL+"/v1/chat/completions", body("q", `,"max_tokens":2,"stream":true,"stream_options":{"include_usage":false}`))
	ev = sseEvents(t, b)
	if len(ev) != 4 || ev[3] != "[DONE]" || strings.Contains(string(b), `"usage"`) {
		t.Fatalf("events %q", ev)
	}
}

func TestBadRequests(t *testing.T) {
	s := startT(t, Config{Name: "wb"})
	for _, c := range []struct{ path, body string }{
		{"/generate", `{"text":`},
		{"/generate", `{}`},
		{"/v1/completions", `not json`},
		{"/v1/completions", `{"max_tokens":1}`},
		{"/v1/chat/completions", `{"messages":`},
		{"/v1/chat/completions", `{"messages":[]}`},
	} {
		resp, b := post(t, s.URL+c.path, c.body)
		if resp.StatusCode != 400 || resp.Header.Get("X-SGLSim-Worker") != "wb" {
			t.Fatalf("%s %s: %d %s", c.path, c.body, resp.StatusCode, b)
		}
		var e map[string]map[string]any
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatal(err)
		}
		er := e["error"]
		if er["type"] != "invalid_request_error" || er["message"] == "" || er["code"].(float64) != 400 {
			t.Fatalf("error body %s", b)
		}
		if v, ok := er["param"]; !ok || v != nil {
			t.Fatalf("param %s", b)
		}
	}
	if st := s.Worker.Stats(); st.Errors != 6 || st.Requests != 6 || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func sortedKeys(m map[string]any) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

func TestLoadsSchema(t *testing.T) {
	s := startT(t, Config{DPSize: 2, CacheTokens: 1000, MaxBatch: 8})
	generate(t, s, "some prompt text", 2)
	_, b := get(t, s.URL+"/v1/loads")
	var top map[string]any
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	if got := sortedKeys(top); !reflect.DeepEqual(got, []string{"loads", "timestamp", "version"}) {
		t.Fatalf("top keys %v", got)
	}
	if _, err := time.Parse(time.RFC3339Nano, top["timestamp"].(string)); err != nil {
		t.Fatal(err)
	}
	loads := top["loads"].([]any)
	if len(loads) != 2 {
		t.Fatalf("loads %s", b)
	}
	want := []string{"cache_hit_rate", "dp_rank", "gen_throughput", "max_running_requests", "max_total_num_tokens",
		"num_running_reqs", "num_total_tokens", "num_used_tokens", "num_waiting_reqs", "num_waiting_uncached_tokens",
		"token_usage", "utilization"}
	for i, l := range loads {
		m := l.(map[string]any)
		if got := sortedKeys(m); !reflect.DeepEqual(got, want) {
			t.Fatalf("rank keys %v", got)
		}
		if m["dp_rank"].(float64) != float64(i) || m["max_running_requests"].(float64) != 8 || m["max_total_num_tokens"].(float64) != 1000 {
			t.Fatalf("rank %d: %v", i, m)
		}
	}
	l := s.Worker.Loads()
	if l.Loads[0].NumUsedTokens != 4 || l.Loads[0].NumRunningReqs != 0 {
		t.Fatalf("%+v", l.Loads[0])
	}
	_, b = get(t, s.URL+"/get_load")
	if gl := decodeT[[]map[string]any](t, b); len(gl) != 2 || gl[0]["num_tokens"] == nil {
		t.Fatalf("get_load %s", b)
	}
}

func TestInfoEndpoints(t *testing.T) {
	s := startT(t, Config{Name: "wi", Model: "org/m", DPSize: 2, DisaggregationMode: "prefill", CacheTokens: 500})
	for _, p := range []string{"/server_info", "/get_server_info"} {
		resp, b := get(t, s.URL+p)
		if resp.StatusCode != 200 || resp.Header.Get("X-SGLSim-Worker") != "wi" {
			t.Fatalf("%s %d", p, resp.StatusCode)
		}
		m := decodeT[map[string]any](t, b)
		checks := map[string]any{"model_path": "org/m", "served_model_name": "org/m", "dp_size": 2.0, "tp_size": 1.0,
			"disaggregation_mode": "prefill", "disaggregation_bootstrap_port": 8998.0, "load_balance_method": "round_robin",
			"max_total_num_tokens": 500.0, "version": Version}
		for k, v := range checks {
			if m[k] != v {
				t.Fatalf("%s %s = %v, want %v", p, k, m[k], v)
			}
		}
		if st, ok := m["internal_states"].([]any); !ok || len(st) != 2 {
			t.Fatalf("internal_states %v", m["internal_states"])
		}
	}
	for _, p := range []string{"/model_info", "/get_model_info"} {
		_, b := get(t, s.URL+p)
		m := decodeT[map[string]any](t, b)
		if m["model_path"] != "org/m" || m["tokenizer_path"] != "org/m" || m["is_generation"] != true || m["model_type"] == nil {
			t.Fatalf("%s %s", p, b)
		}
		if a, ok := m["architectures"].([]any); !ok || len(a) != 1 {
			t.Fatalf("%s %s", p, b)
		}
	}
	_, b := get(t, s.URL+"/v1/models")
	var models struct {
		Object string                                       `json:"object"`
		Data   []struct{ ID, Object, OwnedBy, Root string } `json:"data"`
	}
	if err := json.Unmarshal(b, &models); err != nil {
		t.Fatal(err)
	}
	raw := decodeT[map[string]any](t, b)
	d := raw["data"].([]any)[0].(map[string]any)
	if models.Object != "list" || len(models.Data) != 1 || d["id"] != "org/m" || d["object"] != "model" || d["owned_by"] != "sglang" || d["root"] != "org/m" {
		t.Fatalf("%s", b)
	}
}

func TestMetrics(t *testing.T) {
	s := startT(t, Config{CacheTokens: 100})
	generate(t, s, "abcdabcd", 3)
	generate(t, s, "abcdabcd", 3)
	resp, b := get(t, s.URL+"/metrics")
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatal(resp.Header.Get("Content-Type"))
	}
	vals := map[string]float64{}
	typed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# TYPE ") {
			f := strings.Fields(line)
			if len(f) != 4 || (f[3] != "gauge" && f[3] != "counter") {
				t.Fatalf("bad TYPE %q", line)
			}
			typed[f[2]] = true
			continue
		}
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		name, v := line[:sp], line[sp+1:]
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		base, lbl, ok := strings.Cut(name, "{")
		if !ok || lbl != `model_name="sim-model"}` || !typed[base] {
			t.Fatalf("bad sample name %q", line)
		}
		vals[base] = f
	}
	want := map[string]float64{
		"sglang:num_running_reqs": 0, "sglang:num_queue_reqs": 0, "sglang:prompt_tokens_total": 4,
		"sglang:generation_tokens_total": 6, "sglang:cached_tokens_total": 2, "sglang:cache_hit_rate": 0.5,
	}
	for k, v := range want {
		if got, ok := vals[k]; !ok || got != v {
			t.Fatalf("%s = %v (present %v), want %v\n%s", k, got, ok, v, b)
		}
	}
}

func TestHealth(t *testing.T) {
	s := startT(t, Config{})
	for _, p := range []string{"/health", "/health_generate"} {
		if resp, b := get(t, s.URL+p); resp.StatusCode != 200 || len(b) != 0 {
			t.Fatalf("%s %d", p, resp.StatusCode)
		}
	}
	s.Worker.SetUnhealthy(true)
	for _, p := range []string{"/health", "/health_generate"} {
		if resp, _ := get(t, s.URL+p); resp.StatusCode != 503 {
			t.Fatalf("%s %d", p, resp.StatusCode)
		}
	}
	s.Worker.SetUnhealthy(false)
	if resp, _ := get(t, s.URL+"/health"); resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	u := startT(t, Config{UnhealthyAfter: time.Nanosecond})
	if resp, _ := get(t, u.URL+"/health"); resp.StatusCode != 503 {
		t.Fatalf("UnhealthyAfter: %d", resp.StatusCode)
	}
	h := startT(t, Config{UnhealthyAfter: time.Hour})
	if resp, _ := get(t, h.URL+"/health"); resp.StatusCode != 200 {
		t.Fatalf("UnhealthyAfter 1h: %d", resp.StatusCode)
	}
}

func TestFailFirstN(t *testing.T) {
	s := startT(t, Config{FailFirstN: 2, ErrorStatus: 503})
	for i := 0; i < 3; i++ {
		resp, b := post(t, s.URL+"/v1/completions", `{"prompt":"x","max_tokens":1}`)
		if i < 2 {
			if resp.StatusCode != 503 || !bytes.Contains(b, []byte(`"error"`)) {
				t.Fatalf("req %d: %d %s", i, resp.StatusCode, b)
			}
		} else if resp.StatusCode != 200 {
			t.Fatalf("req %d: %d %s", i, resp.StatusCode, b)
		}
	}
	if st := s.Worker.Stats(); st.Errors != 2 || st.Requests != 3 {
		t.Fatalf("%+v", st)
	}
	// Default error status is 500.
	d := startT(t, Config{FailFirstN: 1})
	if resp, _ := post(t, d.URL+"/generate", `{"text":"x"}`); resp.StatusCode != 500 {
		t.Fatal(resp.StatusCode)
	}
}

func TestErrorRateSeeded(t *testing.T) {
	pattern := func(seed int64) string {
		s := startT(t, Config{ErrorRate: 0.5, Seed: seed})
		var b strings.Builder
		for i := 0; i < 40; i++ {
			resp, _ := post(t, s.URL+"/generate", `{"text":"x","sampling_params":{"max_new_tokens":1}}`)
			switch resp.StatusCode {
			case 200:
				b.WriteByte('.')
			case 500:
				b.WriteByte('x')
			default:
				t.Fatalf("status %d", resp.StatusCode)
			}
		}
		return b.String()
	}
	p1, p2 := pattern(42), pattern(42)
	if p1 != p2 {
		t.Fatalf("same seed, different pattern:\n%s\n%s", p1, p2)
	}
	if !strings.Contains(p1, "x") || !strings.Contains(p1, ".") {
		t.Fatalf("ErrorRate 0.5 pattern %s", p1)
	}
}

func TestCrashMidStream(t *testing.T) {
	s := startT(t, Config{CrashMidStream: true})
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true}`},
		{"/v1/completions", `{"prompt":"hi","max_tokens":8,"stream":true}`},
		{"/generate", `{"text":"hi","sampling_params":{"max_new_tokens":8},"stream":true}`},
	} {
		resp, err := http.Post(s.URL+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("%s: stream completed without error: %s", c.path, b)
		}
		if !bytes.Contains(b, []byte("data: ")) || bytes.Contains(b, []byte("[DONE]")) {
			t.Fatalf("%s: expected a partial stream, got %q", c.path, b)
		}
	}
	// Non-streaming: the connection is closed without a response.
	if _, err := http.Post(s.URL+"/generate", "application/json", strings.NewReader(`{"text":"hi"}`)); err == nil {
		t.Fatal("non-stream crash: expected an error")
	}
	if st := s.Worker.Stats(); st.Errors != 4 || st.InFlight != 0 {
		t.Fatalf("%+v", st)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestClientAbortStream(t *testing.T) {
	s := startT(t, Config{DecodePerToken: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/v1/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":1000000,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if s.Worker.Stats().InFlight != 1 {
		t.Fatal("expected one request in flight")
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "InFlight to return to 0", func() bool { return s.Worker.Stats().InFlight == 0 })
	l := s.Worker.Loads().Loads[0]
	if l.NumRunningReqs != 0 || l.NumWaitingReqs != 0 {
		t.Fatalf("loads after abort %+v", l)
	}
}

func TestAbortWhileQueued(t *testing.T) {
	// One request holds the prefill for an hour; a second one queues behind it.
	s := startT(t, Config{PrefillPerToken: time.Hour, CacheTokens: 100})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, p := range []string{"aaaa", "bbbbbbbb"} {
		wg.Add(1)
		go func(p string) {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/generate", strings.NewReader(`{"text":"`+p+`"}`))
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
		}(p)
	}
	waitFor(t, "one running and one waiting", func() bool {
		l := s.Worker.Loads().Loads[0]
		return l.NumRunningReqs == 1 && l.NumWaitingReqs == 1
	})
	l := s.Worker.Loads().Loads[0]
	if l.NumWaitingUncachedTokens != 1 && l.NumWaitingUncachedTokens != 2 {
		t.Fatalf("waiting uncached %d", l.NumWaitingUncachedTokens)
	}
	if st := s.Worker.Stats(); st.InFlight != 2 || st.PeakInFlight != 2 {
		t.Fatalf("%+v", st)
	}
	cancel()
	wg.Wait()
	waitFor(t, "InFlight to return to 0", func() bool { return s.Worker.Stats().InFlight == 0 })
	l = s.Worker.Loads().Loads[0]
	if l.NumRunningReqs != 0 || l.NumWaitingReqs != 0 || l.NumWaitingUncachedTokens != 0 || l.NumTotalTokens != 0 {
		t.Fatalf("loads after abort %+v", l)
	}
	if st := s.Worker.Stats(); st.PromptTokens != 0 || st.CacheSize != 0 {
		t.Fatalf("aborted prefill should not count: %+v", st)
	}
}

func TestMaxBatchQueues(t *testing.T) {
	s := startT(t, Config{MaxBatch: 1, DecodePerToken: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/generate", strings.NewReader(`{"text":"x"}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	waitFor(t, "1 decoding and 2 waiting", func() bool {
		l := s.Worker.Loads().Loads[0]
		return l.NumRunningReqs == 1 && l.NumWaitingReqs == 2
	})
	cancel()
	wg.Wait()
	waitFor(t, "InFlight to return to 0", func() bool { return s.Worker.Stats().InFlight == 0 })
}

func TestStartFleet(t *testing.T) {
	servers, err := StartFleet(3, Config{Model: "fm"}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer CloseAll(servers)
	seen := map[string]bool{}
	for i, s := range servers {
		want := fmt.Sprintf("w%d", i)
		resp, _ := get(t, s.URL+"/health")
		if got := resp.Header.Get("X-SGLSim-Worker"); got != want || s.Worker.Name() != want {
			t.Fatalf("worker %d header %q", i, got)
		}
		if seen[s.URL] || !strings.HasPrefix(s.URL, "http://127.0.0.1:") || s.URL != "http://"+s.Addr {
			t.Fatalf("bad URL %s", s.URL)
		}
		seen[s.URL] = true
	}
}

func TestManyRequestsFast(t *testing.T) {
	// 16 system prompts x 8 questions, repeated: exercises the cache at
	// realistic prompt sizes through the handler without network.
	w := New(Config{CacheTokens: 50000})
	h := w.Handler()
	var bodies []string
	for i := 0; i < 16; i++ {
		sys := fmt.Sprintf("system %d: ", i) + strings.Repeat(fmt.Sprintf("rule %d is important. ", i), 60)
		for j := 0; j < 8; j++ {
			b, _ := json.Marshal(map[string]any{"max_tokens": 4, "messages": []map[string]string{
				{"role": "system", "content": sys}, {"role": "user", "content": fmt.Sprintf("question %d about %d", j, i)}}})
			bodies = append(bodies, string(b))
		}
	}
	for round := 0; round < 20; round++ {
		for _, b := range bodies {
			rec := &recorder{header: http.Header{}}
			req, _ := http.NewRequest("POST", "/v1/chat/completions", strings.NewReader(b))
			h.ServeHTTP(rec, req)
			if rec.status != 200 {
				t.Fatalf("status %d %s", rec.status, rec.body.String())
			}
		}
	}
	st := w.Stats()
	if st.Requests != 16*8*20 || st.CachedTokens*10 < st.PromptTokens*9 {
		t.Fatalf("%+v", st)
	}
}

type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return r.body.Write(b)
}

func TestTimingModel(t *testing.T) {
	// Lower bounds only (sleeps can overshoot, never undershoot).
	s := startT(t, Config{CacheTokens: 10000, PrefillPerToken: 100 * time.Microsecond, DecodePerToken: 500 * time.Microsecond})
	prompt := strings.Repeat("abcd", 100) // 100 tokens
	t0 := time.Now()
	generate(t, s, prompt, 10)
	if d := time.Since(t0); d < 10*time.Millisecond+5*time.Millisecond {
		t.Fatalf("uncached request took %v, want >= 15ms", d)
	}
	// streaming decode is paced per token
	t0 = time.Now()
	_, b := post(t, s.URL+"/generate", `{"text":"zz","sampling_params":{"max_new_tokens":20},"stream":true}`)
	if d := time.Since(t0); d < 10*time.Millisecond {
		t.Fatalf("stream took %v, want >= 10ms", d)
	}
	if ev := sseEvents(t, b); len(ev) != 21 {
		t.Fatalf("%d events", len(ev))
	}
}

func TestConcurrentLoad(t *testing.T) {
	s := startT(t, Config{CacheTokens: 2000, DPSize: 2, MaxBatch: 4,
		PrefillPerToken: time.Microsecond, DecodePerToken: 20 * time.Microsecond})
	var wg sync.WaitGroup
	const n = 40
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			body := fmt.Sprintf(`{"messages":[{"role":"system","content":"shared system prompt"},{"role":"user","content":"q%d"}],"max_tokens":8,"stream":%v}`, i, i%2 == 0)
			resp, err := http.Post(s.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			if _, err := io.ReadAll(resp.Body); err != nil || resp.StatusCode != 200 {
				errs <- fmt.Errorf("status %d err %v", resp.StatusCode, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := s.Worker.Stats()
	if st.Requests != n || st.CompletionTokens != n*8 || st.InFlight != 0 || st.Errors != 0 {
		t.Fatalf("%+v", st)
	}
	for _, l := range s.Worker.Loads().Loads {
		if l.NumRunningReqs != 0 || l.NumWaitingReqs != 0 {
			t.Fatalf("%+v", l)
		}
	}
}

func TestLatency(t *testing.T) {
	s := startT(t, Config{Latency: 20 * time.Millisecond})
	t0 := time.Now()
	generate(t, s, "x", 1)
	if d := time.Since(t0); d < 20*time.Millisecond {
		t.Fatalf("took %v", d)
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	base := runtime.NumGoroutine()
	s, err := Start(Config{DecodePerToken: time.Millisecond, PrefillPerToken: time.Hour / 1000, CacheTokens: 100}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			body := fmt.Sprintf(`{"prompt":"p%d","max_tokens":100000,"stream":true}`, i)
			req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/v1/completions", strings.NewReader(body))
			if resp, err := client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}(i)
	}
	waitFor(t, "5 requests in flight", func() bool { return s.Worker.Stats().InFlight == 5 })
	cancel()
	wg.Wait()
	waitFor(t, "InFlight to return to 0", func() bool { return s.Worker.Stats().InFlight == 0 })
	s.Close()
	tr.CloseIdleConnections()
	waitFor(t, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= base })
}
