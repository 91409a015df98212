package sim

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// Usage is the OpenAI usage object.
type Usage struct {
	PromptTokens        int           `json:"prompt_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	TotalTokens         int           `json:"total_tokens"`
	PromptTokensDetails promptDetails `json:"prompt_tokens_details"`
}

func usageOf(res *runResult) Usage {
	return Usage{
		PromptTokens:        res.promptTokens,
		CompletionTokens:    res.outputTokens,
		TotalTokens:         res.promptTokens + res.outputTokens,
		PromptTokensDetails: promptDetails{CachedTokens: res.cachedTokens},
	}
}

// ---- /v1/completions ----

type completionReq struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	Logprobs      *int            `json:"logprobs"`
}

type completionLogprobs struct {
	Tokens        []string  `json:"tokens"`
	TokenLogprobs []float64 `json:"token_logprobs"`
	TopLogprobs   any       `json:"top_logprobs"`
	TextOffset    []int     `json:"text_offset"`
}

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
	MatchedStop  any                 `json:"matched_stop"`
}

type completionResp struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
}

func strp(s string) *string { return &s }

// promptSeq turns an OpenAI completions prompt into tokens: a string, a list
// of strings (joined by ' '), a list of token ids, or a list of such lists
// (the first one is used).
func (w *Worker) promptSeq(raw json.RawMessage) (tokenSeq, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return seqFromText(s, w.cfg.CharsPerToken), true
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err == nil {
		return seqFromText(strings.Join(ss, " "), w.cfg.CharsPerToken), true
	}
	var ids []int
	if err := json.Unmarshal(raw, &ids); err == nil {
		return seqFromIDs(ids), true
	}
	var many [][]int
	if err := json.Unmarshal(raw, &many); err == nil && len(many) > 0 {
		return seqFromIDs(many[0]), true
	}
	return tokenSeq{}, false
}

func (w *Worker) completionLogprobs(seed uint64, from, to int, offset int) *completionLogprobs {
	lp := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TextOffset: []int{}}
	for i := from; i < to; i++ {
		t := outputToken(seed, i)
		lp.Tokens = append(lp.Tokens, t)
		lp.TokenLogprobs = append(lp.TokenLogprobs, pseudoLogprob(int(tokenKey(t)%vocabSize), i))
		lp.TextOffset = append(lp.TextOffset, offset)
		offset += len(t)
	}
	return lp
}

func (w *Worker) handleCompletions(rw http.ResponseWriter, r *http.Request) {
	c := w.begin(rw, r)
	if c == nil {
		return
	}
	defer c.end()
	var req completionReq
	if !c.decode(&req) {
		return
	}
	if len(req.Prompt) == 0 || string(req.Prompt) == "null" {
		c.badRequest("prompt is required")
		return
	}
	seq, ok := w.promptSeq(req.Prompt)
	if !ok {
		c.badRequest("prompt must be a string, a list of strings or a list of token ids")
		return
	}
	n := maxTokens(req.MaxTokens)
	id := "cmpl-" + w.nextID()
	created := time.Now().Unix()
	seed := seqSeed(seq)
	if !req.Stream {
		res, err := w.run(r.Context(), seq, n, nil, nil)
		if err != nil {
			return
		}
		if w.cfg.CrashMidStream {
			c.crash()
		}
		u := usageOf(res)
		ch := completionChoice{Text: outputText(seed, n), FinishReason: strp("length")}
		if req.Logprobs != nil {
			ch.Logprobs = w.completionLogprobs(seed, 0, n, 0)
		}
		writeJSON(rw, http.StatusOK, completionResp{ID: id, Object: "text_completion", Created: created,
			Model: w.cfg.Model, Choices: []completionChoice{ch}, Usage: &u})
		return
	}
	s := &sse{rw: rw}
	offset := 0
	res, err := w.run(r.Context(), seq, n, nil, func(i int, res *runResult) error {
		if w.cfg.CrashMidStream && i >= crashPoint(n) {
			c.crash()
		}
		t := outputToken(seed, i)
		ch := completionChoice{Text: t}
		if req.Logprobs != nil {
			ch.Logprobs = w.completionLogprobs(seed, i, i+1, offset)
		}
		offset += len(t)
		if i == n-1 {
			ch.FinishReason = strp("length")
		}
		return s.send(completionResp{ID: id, Object: "text_completion", Created: created, Model: w.cfg.Model,
			Choices: []completionChoice{ch}})
	})
	if err != nil {
		return
	}
	if n == 0 {
		if err := s.send(completionResp{ID: id, Object: "text_completion", Created: created, Model: w.cfg.Model,
			Choices: []completionChoice{{FinishReason: strp("length")}}}); err != nil {
			return
		}
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		u := usageOf(res)
		if err := s.send(completionResp{ID: id, Object: "text_completion", Created: created, Model: w.cfg.Model,
			Choices: []completionChoice{}, Usage: &u}); err != nil {
			return
		}
	}
	s.send("[DONE]")
}

// ---- /v1/chat/completions ----

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type chatReq struct {
	Model               string         `json:"model"`
	Messages            []chatMessage  `json:"messages"`
	MaxTokens           *int           `json:"max_tokens"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	Stream              bool           `json:"stream"`
	StreamOptions       *streamOptions `json:"stream_options"`
	Logprobs            bool           `json:"logprobs"`
	TopLogprobs         int            `json:"top_logprobs"`
}

// ChatTemplate renders messages the way the simulator tokenizes them:
// "<|role|>content\n" per message followed by "<|assistant|>". Content may
// be a string, null, or a list of parts whose "text" fields are concatenated.
func ChatTemplate(msgs []ChatMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|")
		b.WriteString(m.Role)
		b.WriteString("|>")
		b.WriteString(m.Content)
		b.WriteString("\n")
	}
	b.WriteString("<|assistant|>")
	return b.String()
}

// ChatMessage is a role and its flattened text content.
type ChatMessage struct {
	Role, Content string
}

func flattenContent(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", false
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), true
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatMsgOut struct {
	Role             string `json:"role"`
	Content          string `json:"content"`
	ReasoningContent any    `json:"reasoning_content"`
	ToolCalls        any    `json:"tool_calls"`
}

type chatTokenLogprob struct {
	Token       string  `json:"token"`
	Logprob     float64 `json:"logprob"`
	Bytes       []int   `json:"bytes"`
	TopLogprobs []any   `json:"top_logprobs"`
}

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      *chatMsgOut   `json:"message,omitempty"`
	Delta        *chatDelta    `json:"delta,omitempty"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
	MatchedStop  any           `json:"matched_stop"`
}

type chatResp struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *Usage       `json:"usage,omitempty"`
}

func chatLP(seed uint64, from, to int) *chatLogprobs {
	lp := &chatLogprobs{Content: []chatTokenLogprob{}}
	for i := from; i < to; i++ {
		t := outputToken(seed, i)
		bs := make([]int, len(t))
		for j := 0; j < len(t); j++ {
			bs[j] = int(t[j])
		}
		lp.Content = append(lp.Content, chatTokenLogprob{Token: t,
			Logprob: pseudoLogprob(int(tokenKey(t)%vocabSize), i), Bytes: bs, TopLogprobs: []any{}})
	}
	return lp
}

func (w *Worker) handleChat(rw http.ResponseWriter, r *http.Request) {
	c := w.begin(rw, r)
	if c == nil {
		return
	}
	defer c.end()
	var req chatReq
	if !c.decode(&req) {
		return
	}
	if len(req.Messages) == 0 {
		c.badRequest("messages must be a non-empty list")
		return
	}
	msgs := make([]ChatMessage, len(req.Messages))
	for i, m := range req.Messages {
		txt, ok := flattenContent(m.Content)
		if !ok {
			c.badRequest("message content must be a string or a list of content parts")
			return
		}
		msgs[i] = ChatMessage{Role: m.Role, Content: txt}
	}
	seq := seqFromText(ChatTemplate(msgs), w.cfg.CharsPerToken)
	n := maxTokens(req.MaxCompletionTokens, req.MaxTokens)
	id := "chatcmpl-" + w.nextID()
	created := time.Now().Unix()
	seed := seqSeed(seq)
	mk := func(ch chatChoice, u *Usage) chatResp {
		cs := []chatChoice{ch}
		if u != nil {
			cs = []chatChoice{}
		}
		return chatResp{ID: id, Object: "chat.completion.chunk", Created: created, Model: w.cfg.Model, Choices: cs, Usage: u}
	}
	if !req.Stream {
		res, err := w.run(r.Context(), seq, n, nil, nil)
		if err != nil {
			return
		}
		if w.cfg.CrashMidStream {
			c.crash()
		}
		u := usageOf(res)
		ch := chatChoice{Message: &chatMsgOut{Role: "assistant", Content: outputText(seed, n)}, FinishReason: strp("length")}
		if req.Logprobs {
			ch.Logprobs = chatLP(seed, 0, n)
		}
		writeJSON(rw, http.StatusOK, chatResp{ID: id, Object: "chat.completion", Created: created,
			Model: w.cfg.Model, Choices: []chatChoice{ch}, Usage: &u})
		return
	}
	s := &sse{rw: rw}
	empty := ""
	res, err := w.run(r.Context(), seq, n, func(*runResult) error {
		return s.send(mk(chatChoice{Delta: &chatDelta{Role: "assistant", Content: &empty}}, nil))
	}, func(i int, res *runResult) error {
		if w.cfg.CrashMidStream && i >= crashPoint(n) {
			c.crash()
		}
		t := outputToken(seed, i)
		ch := chatChoice{Delta: &chatDelta{Content: &t}}
		if req.Logprobs {
			ch.Logprobs = chatLP(seed, i, i+1)
		}
		if i == n-1 {
			ch.FinishReason = strp("length")
		}
		return s.send(mk(ch, nil))
	})
	if err != nil {
		return
	}
	if n == 0 {
		if err := s.send(mk(chatChoice{Delta: &chatDelta{}, FinishReason: strp("length")}, nil)); err != nil {
			return
		}
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		u := usageOf(res)
		if err := s.send(mk(chatChoice{}, &u)); err != nil {
			return
		}
	}
	s.send("[DONE]")
}
