package llmreq

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fastjson"
)

var benchWords = []string{
	"the", "model", "request", "router", "cache", "prefix", "worker", "latency", "token", "prompt",
	"gateway", "it's", "configuration", "a", "of", "to", "and", "in", "is", "that",
	"for", "with", "as", "on", "be", "this", "which", "(see", "below)", "throughput", "decode",
	"prefill", "batch", "user's", "answer:", "because", "however,", "e.g.", "50%", "value",
	"naïve", "résumé", "100ms", "GPU", "memory", "schedule", "we", "can", "should", "not",
}

// benchText returns about n bytes of deterministic English-like text. About
// one JSON escape per 100-150 bytes: newlines (sentence and paragraph breaks),
// double quotes and the odd backslash; a little raw non-ASCII.
func benchText(n int, seed uint32) string {
	var sb bytes.Buffer
	x := seed*2654435761 + 1
	words := 0
	for sb.Len() < n {
		x = x*1664525 + 1013904223
		w := benchWords[(x>>8)%uint32(len(benchWords))]
		if words > 0 {
			switch r := (x >> 20) % 256; {
			case r < 3:
				sb.WriteString(".\n\n")
			case r < 8:
				sb.WriteString(".\n")
			case r < 24:
				sb.WriteString(". ")
			case r < 30:
				sb.WriteString(", ")
			default:
				sb.WriteByte(' ')
			}
		}
		switch (x >> 12) % 1024 {
		case 0, 1, 2, 3, 4, 5, 6, 7:
			sb.WriteString(`"` + w + `"`)
		case 8:
			sb.WriteString(`C:\` + w)
		default:
			sb.WriteString(w)
		}
		words++
	}
	return sb.String()
}

// chatBody builds a deterministic chat-completion body of about size bytes:
// a system message and a few user/assistant turns.
func chatBody(size int) []byte {
	type msg struct {
		Role             string `json:"role"`
		Content          string `json:"content"`
		ReasoningContent string `json:"reasoning_content,omitempty"`
	}
	// The JSON framing costs about 450 bytes; the texts fill the rest.
	per := (size - 450) / 8
	msgs := []msg{{Role: "system", Content: benchText(per, 1)}}
	for i := 0; i < 3; i++ {
		msgs = append(msgs, msg{Role: "user", Content: benchText(per, uint32(10+i))})
		m := msg{Role: "assistant", Content: benchText(per*3/4, uint32(20+i))}
		m.ReasoningContent = benchText(per/4, uint32(30+i))
		msgs = append(msgs, m)
	}
	msgs = append(msgs, msg{Role: "user", Content: benchText(per/2, 40)})
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	err := enc.Encode(map[string]any{
		"model":       "meta-llama/Llama-3.1-8B-Instruct",
		"messages":    msgs,
		"stream":      true,
		"max_tokens":  256,
		"temperature": 0.7,
	})
	if err != nil {
		panic(err)
	}
	return out.Bytes()
}

type benchChat struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role             string `json:"role"`
		Content          string `json:"content"`
		ReasoningContent string `json:"reasoning_content"`
	} `json:"messages"`
}

func appendPart(dst []byte, s []byte) []byte {
	if len(s) == 0 {
		return dst
	}
	if len(dst) > 0 {
		dst = append(dst, ' ')
	}
	return append(dst, s...)
}

var (
	sinkText   []byte
	sinkModel  []byte
	sinkStream bool
)

func BenchmarkParse(b *testing.B) {
	sizes := []struct {
		name string
		n    int
	}{{"1KiB", 1 << 10}, {"32KiB", 32 << 10}, {"220KiB", 220 << 10}}
	for _, sz := range sizes {
		body := chatBody(sz.n)
		// All variants must agree on the routing text.
		var r Request
		if err := Parse(EndpointChatCompletions, body, &r); err != nil {
			b.Fatal(err)
		}
		want := string(r.Text)
		check := func(b *testing.B, text []byte) {
			if string(text) != want {
				b.Fatalf("text mismatch: got %d bytes, want %d", len(text), len(want))
			}
		}
		b.Run(sz.name+"/llmreq", func(b *testing.B) {
			var r Request
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := Parse(EndpointChatCompletions, body, &r); err != nil {
					b.Fatal(err)
				}
				sinkText, sinkModel, sinkStream = r.Text, r.Model, r.Stream
			}
			check(b, sinkText)
		})
		b.Run(sz.name+"/encoding_json", func(b *testing.B) {
			var buf []byte
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				var req benchChat
				if err := json.Unmarshal(body, &req); err != nil {
					b.Fatal(err)
				}
				buf = buf[:0]
				for _, m := range req.Messages {
					buf = appendPart(buf, []byte(m.Content))
					if m.Role == "assistant" {
						buf = appendPart(buf, []byte(m.ReasoningContent))
					}
				}
				sinkText, sinkModel, sinkStream = buf, []byte(req.Model), req.Stream
			}
			check(b, sinkText)
		})
		b.Run(sz.name+"/gjson", func(b *testing.B) {
			var buf []byte
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				model := gjson.GetBytes(body, "model")
				stream := gjson.GetBytes(body, "stream")
				buf = buf[:0]
				gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
					buf = appendPart(buf, []byte(m.Get("content").String()))
					if m.Get("role").String() == "assistant" {
						buf = appendPart(buf, []byte(m.Get("reasoning_content").String()))
					}
					return true
				})
				sinkText, sinkModel, sinkStream = buf, []byte(model.String()), stream.Bool()
			}
			check(b, sinkText)
		})
		b.Run(sz.name+"/fastjson", func(b *testing.B) {
			var p fastjson.Parser
			var buf []byte
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				v, err := p.ParseBytes(body)
				if err != nil {
					b.Fatal(err)
				}
				buf = buf[:0]
				for _, m := range v.GetArray("messages") {
					buf = appendPart(buf, m.GetStringBytes("content"))
					if string(m.GetStringBytes("role")) == "assistant" {
						buf = appendPart(buf, m.GetStringBytes("reasoning_content"))
					}
				}
				sinkText, sinkModel, sinkStream = buf, v.GetStringBytes("model"), v.GetBool("stream")
			}
			check(b, sinkText)
		})
	}
}

func ExampleParse() {
	body := []byte(`{"model":"llama","stream":true,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"What is\nthis?"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`)
	var r Request
	if err := Parse(EndpointOf("/v1/chat/completions"), body, &r); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("model=%s stream=%v text=%q fields=%d\n", r.Model, r.Stream, r.Text, len(r.Fields))
	err := Parse(EndpointChatCompletions, []byte(`{"messages":[}`), &r)
	fmt.Println(err)
	// Output:
	// model=llama stream=true text="Be brief. What is\nthis?" fields=3
	// invalid JSON at offset 13: unexpected character '}', expected value
}
