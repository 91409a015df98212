package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Version is reported by /server_info, /v1/loads and /metrics.
const Version = "0.5.0-sglsim"

// DefaultMaxTokens is the completion length when a request does not set one.
const DefaultMaxTokens = 16

var fillerWords = []string{
	" the", " sim", " lat", " ent", " tok", " and", " of", " cac",
	" he", " rou", " ter", " is", " a", " fast", " wor", " ker",
}

func outputToken(seed uint64, i int) string {
	return fillerWords[(seed+uint64(i)*7)%uint64(len(fillerWords))]
}

func outputText(seed uint64, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(outputToken(seed, i))
	}
	return b.String()
}

func seqSeed(seq tokenSeq) uint64 {
	if len(seq.keys) == 0 {
		return 0
	}
	return seq.keys[len(seq.keys)-1] % 1009
}

// pseudoLogprob is a deterministic fake logprob in (-2, 0].
func pseudoLogprob(id int, pos int) float64 {
	v := (uint64(id)*2654435761 + uint64(pos)*40503) % 2000
	return -math.Round(float64(v)) / 1000
}

// Handler returns the worker's HTTP handler.
func (w *Worker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", w.handleHealth)
	mux.HandleFunc("/health_generate", w.handleHealth)
	mux.HandleFunc("GET /server_info", w.handleServerInfo)
	mux.HandleFunc("GET /get_server_info", w.handleServerInfo)
	mux.HandleFunc("GET /model_info", w.handleModelInfo)
	mux.HandleFunc("GET /get_model_info", w.handleModelInfo)
	mux.HandleFunc("GET /v1/models", w.handleModels)
	mux.HandleFunc("GET /v1/loads", w.handleLoads)
	mux.HandleFunc("GET /get_load", w.handleGetLoad)
	mux.HandleFunc("GET /metrics", w.handleMetrics)
	mux.HandleFunc("/flush_cache", w.handleFlush)
	mux.HandleFunc("POST /generate", w.handleGenerate)
	mux.HandleFunc("POST /v1/completions", w.handleCompletions)
	mux.HandleFunc("POST /v1/chat/completions", w.handleChat)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("X-SGLSim-Worker", w.cfg.Name)
		rw.Header().Set("X-Worker-Id", w.cfg.Name)
		mux.ServeHTTP(rw, r)
	})
}

func (w *Worker) logf(format string, args ...any) {
	if w.cfg.Logf != nil {
		w.cfg.Logf(format, args...)
	}
}

func writeJSON(rw http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	rw.WriteHeader(status)
	rw.Write(b)
	rw.Write([]byte("\n"))
}

type apiError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"`
	Code    int    `json:"code"`
}

func writeError(rw http.ResponseWriter, status int, typ, msg string) {
	writeJSON(rw, status, map[string]apiError{"error": {Message: msg, Type: typ, Param: nil, Code: status}})
}

func (w *Worker) handleHealth(rw http.ResponseWriter, r *http.Request) {
	if !w.Healthy() {
		rw.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	rw.WriteHeader(http.StatusOK)
}

func (w *Worker) handleFlush(rw http.ResponseWriter, r *http.Request) {
	w.FlushCache()
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.WriteHeader(http.StatusOK)
	io.WriteString(rw, "Cache flushed.\n")
}

func (w *Worker) handleServerInfo(rw http.ResponseWriter, r *http.Request) {
	states := make([]map[string]any, len(w.ranks))
	for i := range states {
		states[i] = map[string]any{
			"dp_rank":             i,
			"last_gen_throughput": w.genThroughput(),
			"memory_usage":        map[string]any{},
		}
	}
	writeJSON(rw, http.StatusOK, map[string]any{
		"model_path":                    w.cfg.Model,
		"tokenizer_path":                w.cfg.Model,
		"served_model_name":             w.cfg.Model,
		"dp_size":                       w.cfg.DPSize,
		"tp_size":                       1,
		"pp_size":                       1,
		"disaggregation_mode":           w.cfg.DisaggregationMode,
		"disaggregation_bootstrap_port": 8998,
		"load_balance_method":           "round_robin",
		"max_total_num_tokens":          w.maxTotalTokens(),
		"max_running_requests":          w.cfg.MaxBatch,
		"max_prefill_tokens":            16384,
		"chunked_prefill_size":          8192,
		"page_size":                     1,
		"disable_radix_cache":           w.cfg.CacheTokens <= 0,
		"version":                       Version,
		"internal_states":               states,
		"kv_events":                     nil,
		"worker_id":                     w.cfg.Name,
		"load_in_flight":                w.inFlight.Load(),
	})
}

func (w *Worker) handleModelInfo(rw http.ResponseWriter, r *http.Request) {
	writeJSON(rw, http.StatusOK, map[string]any{
		"model_path":                w.cfg.Model,
		"tokenizer_path":            w.cfg.Model,
		"is_generation":             true,
		"preferred_sampling_params": nil,
		"weight_version":            "default",
		"has_image_understanding":   false,
		"has_audio_understanding":   false,
		"model_type":                "sim",
		"architectures":             []string{"SimForCausalLM"},
	})
}

func (w *Worker) handleModels(rw http.ResponseWriter, r *http.Request) {
	writeJSON(rw, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": w.cfg.Model, "object": "model", "created": w.start.Unix(),
			"owned_by": "sglang", "root": w.cfg.Model, "max_model_len": 32768,
		}},
	})
}

// LoadEntry is one DP rank of GET /v1/loads.
type LoadEntry struct {
	DPRank                   int     `json:"dp_rank"`
	NumRunningReqs           int64   `json:"num_running_reqs"`
	NumWaitingReqs           int64   `json:"num_waiting_reqs"`
	NumWaitingUncachedTokens int64   `json:"num_waiting_uncached_tokens"`
	NumUsedTokens            int64   `json:"num_used_tokens"`
	NumTotalTokens           int64   `json:"num_total_tokens"`
	MaxTotalNumTokens        int64   `json:"max_total_num_tokens"`
	MaxRunningRequests       int64   `json:"max_running_requests"`
	TokenUsage               float64 `json:"token_usage"`
	GenThroughput            float64 `json:"gen_throughput"`
	CacheHitRate             float64 `json:"cache_hit_rate"`
	Utilization              float64 `json:"utilization"`
}

// LoadsResponse is the body of GET /v1/loads.
type LoadsResponse struct {
	Timestamp string      `json:"timestamp"`
	Version   string      `json:"version"`
	Loads     []LoadEntry `json:"loads"`
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// Loads returns what GET /v1/loads reports. The prefix cache is shared by
// all ranks; its size is attributed to rank 0.
func (w *Worker) Loads() LoadsResponse {
	out := LoadsResponse{Timestamp: time.Now().UTC().Format(time.RFC3339Nano), Version: Version}
	maxTot := int64(w.maxTotalTokens())
	perRankTP := w.genThroughput() / float64(len(w.ranks))
	hit := round(w.cacheHitRate(), 4)
	cacheSize := int64(w.cache.len())
	for i := range w.ranks {
		rs := &w.ranks[i]
		used := rs.runningTokens.Load()
		if i == 0 {
			used += cacheSize
		}
		used = min(used, maxTot)
		waitingUncached := rs.waitingUncached.Load()
		if w.cfg.DisaggregationMode == "decode" {
			waitingUncached = 0 // as the engine reports for decode workers
		}
		out.Loads = append(out.Loads, LoadEntry{
			DPRank:                   i,
			NumRunningReqs:           rs.running.Load(),
			NumWaitingReqs:           rs.waiting.Load(),
			NumWaitingUncachedTokens: waitingUncached,
			NumUsedTokens:            used,
			NumTotalTokens:           used + rs.waitingTokens.Load(),
			MaxTotalNumTokens:        maxTot,
			MaxRunningRequests:       int64(w.cfg.MaxBatch),
			TokenUsage:               round(float64(used)/float64(maxTot), 4),
			GenThroughput:            round(perRankTP, 2),
			CacheHitRate:             hit,
			Utilization:              0,
		})
	}
	return out
}

func (w *Worker) handleLoads(rw http.ResponseWriter, r *http.Request) {
	l := w.Loads()
	if v := r.URL.Query().Get("dp_rank"); v != "" {
		rank, err := strconv.Atoi(v)
		if err != nil || rank < 0 || rank >= len(l.Loads) {
			writeError(rw, http.StatusBadRequest, "invalid_request_error", "invalid dp_rank")
			return
		}
		l.Loads = l.Loads[rank : rank+1]
	}
	writeJSON(rw, http.StatusOK, l)
}

// handleGetLoad is the legacy /get_load shim.
func (w *Worker) handleGetLoad(rw http.ResponseWriter, r *http.Request) {
	l := w.Loads()
	out := make([]map[string]any, len(l.Loads))
	for i, e := range l.Loads {
		out[i] = map[string]any{
			"dp_rank": e.DPRank, "num_reqs": e.NumRunningReqs + e.NumWaitingReqs,
			"num_waiting_reqs": e.NumWaitingReqs, "num_tokens": e.NumUsedTokens,
			"num_pending_tokens": e.NumWaitingUncachedTokens, "ts_tic": float64(time.Now().UnixNano()) / 1e9,
		}
	}
	writeJSON(rw, http.StatusOK, out)
}

func (w *Worker) handleMetrics(rw http.ResponseWriter, r *http.Request) {
	var running, waiting int64
	for i := range w.ranks {
		running += w.ranks[i].running.Load()
		waiting += w.ranks[i].waiting.Load()
	}
	l := w.Loads()
	var used int64
	for _, e := range l.Loads {
		used += e.NumUsedTokens
	}
	lbl := fmt.Sprintf("{model_name=%q}", w.cfg.Model)
	var b bytes.Buffer
	metric := func(name, typ, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s%s %s\n", name, help, name, typ, name, lbl,
			strconv.FormatFloat(v, 'g', -1, 64))
	}
	metric("sglang:num_running_reqs", "gauge", "The number of running requests.", float64(running))
	metric("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", float64(waiting))
	metric("sglang:num_used_tokens", "gauge", "The number of used tokens.", float64(used))
	metric("sglang:token_usage", "gauge", "The token usage.", round(float64(used)/float64(w.maxTotalTokens()), 4))
	metric("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", w.genThroughput())
	metric("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", w.cacheHitRate())
	metric("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", float64(w.promptTokens.Load()))
	metric("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.", float64(w.completionTokens.Load()))
	metric("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens.", float64(w.cachedTokens.Load()))
	metric("sglang:num_requests_total", "counter", "Number of requests received.", float64(w.requests.Load()))
	rw.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	rw.WriteHeader(http.StatusOK)
	rw.Write(b.Bytes())
}

// ---- generation plumbing ----

// genCall holds the per-request fault/accounting state shared by the
// generation endpoints.
type genCall struct {
	w      *Worker
	rw     http.ResponseWriter
	r      *http.Request
	start  time.Time
	failed bool
	leave  func()
}

// begin counts the request, applies Latency and injected errors. It returns
// nil when the request was already answered.
func (w *Worker) begin(rw http.ResponseWriter, r *http.Request) *genCall {
	n := w.requests.Add(1)
	c := &genCall{w: w, rw: rw, r: r, start: time.Now(), leave: w.enter()}
	if err := sleepCtx(r.Context(), w.cfg.Latency); err != nil {
		c.end()
		return nil
	}
	if st := w.injectFault(n); st != 0 {
		c.fail(st, "server_error", fmt.Sprintf("sglsim %s: injected failure", w.cfg.Name))
		c.end()
		return nil
	}
	return c
}

func (c *genCall) fail(status int, typ, msg string) {
	if !c.failed {
		c.failed = true
		c.w.errors.Add(1)
	}
	writeError(c.rw, status, typ, msg)
}

func (c *genCall) end() {
	c.leave()
	c.w.logf("%s %s %s %s", c.w.cfg.Name, c.r.Method, c.r.URL.Path, time.Since(c.start).Round(time.Microsecond))
}

// crash aborts the connection (CrashMidStream).
func (c *genCall) crash() {
	if !c.failed {
		c.failed = true
		c.w.errors.Add(1)
	}
	// Streamed chunks were already flushed; abort without a clean end.
	panic(http.ErrAbortHandler)
}

func (c *genCall) decode(v any) bool {
	body, err := io.ReadAll(io.LimitReader(c.r.Body, 64<<20))
	if err != nil {
		c.fail(http.StatusBadRequest, "invalid_request_error", "cannot read body: "+err.Error())
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		c.fail(http.StatusBadRequest, "invalid_request_error", "malformed JSON: "+err.Error())
		return false
	}
	return true
}

func (c *genCall) badRequest(msg string) {
	c.fail(http.StatusBadRequest, "invalid_request_error", msg)
}

// sse is a server-sent-events writer.
type sse struct {
	rw      http.ResponseWriter
	started bool
}

func (s *sse) send(v any) error {
	if !s.started {
		s.started = true
		h := s.rw.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		s.rw.WriteHeader(http.StatusOK)
	}
	var b []byte
	if str, ok := v.(string); ok {
		b = []byte(str)
	} else {
		var err error
		if b, err = json.Marshal(v); err != nil {
			return err
		}
	}
	buf := make([]byte, 0, len(b)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	if _, err := s.rw.Write(buf); err != nil {
		return err
	}
	return http.NewResponseController(s.rw).Flush()
}

func maxTokens(vals ...*int) int {
	for _, v := range vals {
		if v != nil && *v >= 0 {
			return *v
		}
	}
	return DefaultMaxTokens
}

// crashPoint is the output index after which CrashMidStream aborts.
func crashPoint(n int) int { return n / 2 }

// ---- /generate ----

type samplingParams struct {
	MaxNewTokens *int `json:"max_new_tokens"`
}

type generateReq struct {
	Text           json.RawMessage `json:"text"`
	InputIDs       json.RawMessage `json:"input_ids"`
	SamplingParams json.RawMessage `json:"sampling_params"`
	Stream         bool            `json:"stream"`
	ReturnLogprob  bool            `json:"return_logprob"`
	Rid            json.RawMessage `json:"rid"`
}

type finishReason struct {
	Type   string `json:"type"`
	Length int    `json:"length"`
}

type generateMeta struct {
	ID                  string        `json:"id"`
	FinishReason        *finishReason `json:"finish_reason"`
	PromptTokens        int           `json:"prompt_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	CachedTokens        int           `json:"cached_tokens"`
	E2ELatency          float64       `json:"e2e_latency"`
	InputTokenLogprobs  [][3]any      `json:"input_token_logprobs,omitempty"`
	OutputTokenLogprobs [][3]any      `json:"output_token_logprobs,omitempty"`
	Weight              string        `json:"weight_version"`
}

type generateResp struct {
	Text     string       `json:"text"`
	MetaInfo generateMeta `json:"meta_info"`
}

func parseIDs(raw json.RawMessage) ([][]int, bool, error) {
	var one []int
	if err := json.Unmarshal(raw, &one); err == nil {
		return [][]int{one}, false, nil
	}
	var many [][]int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, false, errors.New("input_ids must be a list of ints or a list of lists of ints")
	}
	return many, true, nil
}

func (w *Worker) handleGenerate(rw http.ResponseWriter, r *http.Request) {
	c := w.begin(rw, r)
	if c == nil {
		return
	}
	defer c.end()
	var req generateReq
	if !c.decode(&req) {
		return
	}
	var seqs []tokenSeq
	batch := false
	switch {
	case len(req.Text) > 0 && string(req.Text) != "null":
		var s string
		if err := json.Unmarshal(req.Text, &s); err == nil {
			seqs = []tokenSeq{seqFromText(s, w.cfg.CharsPerToken)}
		} else {
			var ss []string
			if err := json.Unmarshal(req.Text, &ss); err != nil {
				c.badRequest("text must be a string or a list of strings")
				return
			}
			batch = true
			for _, s := range ss {
				seqs = append(seqs, seqFromText(s, w.cfg.CharsPerToken))
			}
		}
	case len(req.InputIDs) > 0 && string(req.InputIDs) != "null":
		ids, b, err := parseIDs(req.InputIDs)
		if err != nil {
			c.badRequest(err.Error())
			return
		}
		batch = b
		for _, x := range ids {
			seqs = append(seqs, seqFromIDs(x))
		}
	default:
		c.badRequest("either text or input_ids should be provided")
		return
	}
	// sampling_params may be one object or one per batch element.
	sps := make([]samplingParams, len(seqs))
	if len(req.SamplingParams) > 0 && string(req.SamplingParams) != "null" {
		var one samplingParams
		if err := json.Unmarshal(req.SamplingParams, &one); err == nil {
			for i := range sps {
				sps[i] = one
			}
		} else {
			var many []samplingParams
			if err := json.Unmarshal(req.SamplingParams, &many); err != nil {
				c.badRequest("invalid sampling_params: " + err.Error())
				return
			}
			for i := range sps {
				if i < len(many) {
					sps[i] = many[i]
				}
			}
		}
	}
	rid := ""
	if len(req.Rid) > 0 {
		json.Unmarshal(req.Rid, &rid)
	}
	if batch && req.Stream {
		c.badRequest("sglsim: streaming is not supported for batch requests")
		return
	}
	if batch {
		outs := make([]generateResp, 0, len(seqs))
		for i, seq := range seqs {
			n := maxTokens(sps[i].MaxNewTokens)
			res, err := w.run(r.Context(), seq, n, nil, nil)
			if err != nil {
				return
			}
			if w.cfg.CrashMidStream {
				c.crash()
			}
			outs = append(outs, w.generateResult(c, seq, res, n, "", req.ReturnLogprob, n))
		}
		writeJSON(rw, http.StatusOK, outs)
		return
	}
	seq, n := seqs[0], maxTokens(sps[0].MaxNewTokens)
	if rid == "" {
		rid = w.nextID()
	}
	if !req.Stream {
		res, err := w.run(r.Context(), seq, n, nil, nil)
		if err != nil {
			return
		}
		if w.cfg.CrashMidStream {
			c.crash()
		}
		writeJSON(rw, http.StatusOK, w.generateResult(c, seq, res, n, rid, req.ReturnLogprob, n))
		return
	}
	s := &sse{rw: rw}
	_, err := w.run(r.Context(), seq, n, nil, func(i int, res *runResult) error {
		if w.cfg.CrashMidStream && i >= crashPoint(n) {
			c.crash()
		}
		return s.send(w.generateResult(c, seq, res, n, rid, req.ReturnLogprob, i+1))
	})
	if err != nil {
		return
	}
	if n == 0 {
		// No tokens: still send one chunk with the final meta_info.
		if err := s.send(w.generateResult(c, seq, &runResult{promptTokens: len(seq.keys)}, 0, rid, req.ReturnLogprob, 0)); err != nil {
			return
		}
	}
	s.send("[DONE]")
}

// generateResult builds a /generate body after produced of n tokens.
func (w *Worker) generateResult(c *genCall, seq tokenSeq, res *runResult, n int, rid string, logprob bool, produced int) generateResp {
	if rid == "" {
		rid = w.nextID()
	}
	seed := seqSeed(seq)
	out := generateResp{
		Text: outputText(seed, produced),
		MetaInfo: generateMeta{
			ID:               rid,
			PromptTokens:     res.promptTokens,
			CompletionTokens: produced,
			CachedTokens:     res.cachedTokens,
			E2ELatency:       time.Since(c.start).Seconds(),
			Weight:           "default",
		},
	}
	if produced >= n {
		out.MetaInfo.FinishReason = &finishReason{Type: "length", Length: n}
	}
	if logprob {
		in := make([][3]any, len(seq.ids))
		for i, id := range seq.ids {
			var lp any
			if i > 0 {
				lp = pseudoLogprob(id, i)
			}
			in[i] = [3]any{lp, id, nil}
		}
		outLP := make([][3]any, produced)
		for i := 0; i < produced; i++ {
			id := int(tokenKey(outputToken(seed, i)) % vocabSize)
			outLP[i] = [3]any{pseudoLogprob(id, i), id, nil}
		}
		out.MetaInfo.InputTokenLogprobs = in
		out.MetaInfo.OutputTokenLogprobs = outLP
	}
	return out
}
