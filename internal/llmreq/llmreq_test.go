package llmreq

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestEndpointOf(t *testing.T) {
	cases := map[string]Endpoint{
		"/generate":              EndpointGenerate,
		"/generate/":             EndpointGenerate,
		"/v1/completions":        EndpointCompletions,
		"/v1/completions/":       EndpointCompletions,
		"/v1/chat/completions":   EndpointChatCompletions,
		"/v1/chat/completions/":  EndpointChatCompletions,
		"/v1/chat/completions//": EndpointOther,
		"/v1/embeddings":         EndpointOther,
		"/":                      EndpointOther,
		"":                       EndpointOther,
		"/Generate":              EndpointOther,
	}
	for path, want := range cases {
		if got := EndpointOf(path); got != want {
			t.Errorf("EndpointOf(%q) = %v, want %v", path, got, want)
		}
	}
	names := map[Endpoint]string{EndpointGenerate: "generate", EndpointCompletions: "completions", EndpointChatCompletions: "chat", EndpointOther: "other", 99: "other"}
	for e, want := range names {
		if e.String() != want {
			t.Errorf("%d.String() = %q, want %q", e, e.String(), want)
		}
	}
}

type tcase struct {
	name string
	ep   Endpoint
	body string
	want result
}

// pdOverride holds the expected PDText of cases where it is not the default
// (Text for chat and completions, Text if HasText for generate).
var pdOverride = map[string]string{
	"completions array":                      "a",
	"completions array first empty":          "",
	"completions token id batch":             "1 2",
	"completions token id batch first empty": "",
}

func (tc tcase) expected() result {
	w := tc.want
	pd, ok := pdOverride[tc.name]
	switch {
	case ok:
		w.PDText = pd
	case tc.ep == EndpointGenerate && !w.HasText:
	case tc.ep != EndpointOther:
		w.PDText = w.Text
	}
	return w
}

func model(s string) result { return result{Model: s, HasModel: true} }

var parseCases = []tcase{
	// chat
	{"chat basic", EndpointChatCompletions,
		`{"model":"llama","messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Hi"}],"stream":true}`,
		result{Text: "You are helpful. Hi", Model: "llama", HasModel: true, Stream: true}},
	{"chat assistant reasoning", EndpointChatCompletions,
		`{"messages":[{"role":"system","content":"sys"},{"role":"user","content":"q1"},{"reasoning_content":"think","role":"assistant","content":"a1"},{"role":"user","content":"q2"}]}`,
		result{Text: "sys q1 a1 think q2"}},
	{"chat reasoning only for assistant", EndpointChatCompletions,
		`{"messages":[{"role":"user","content":"q","reasoning_content":"ignored"},{"role":"assistant","content":null,"reasoning_content":"r"}]}`,
		result{Text: "q r"}},
	{"chat escaped role", EndpointChatCompletions,
		`{"messages":[{"role":"assist\u0061nt","content":"a","reasoning_content":"r"}]}`,
		result{Text: "a r"}},
	{"chat content parts", EndpointChatCompletions,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"look at"},{"type":"image_url","image_url":{"url":"data:..."}},{"text":"this","type":"text"},{"type":"image_url","text":"not me"},{"type":"text","text":""},{"type":"text"}]}]}`,
		result{Text: "look at this"}},
	{"chat empty parts skipped", EndpointChatCompletions,
		`{"messages":[{"role":"system","content":""},{"role":"user","content":"a"},{"role":"assistant","content":"","reasoning_content":""},{"role":"user","content":[]},{"role":"tool","content":"b"},{}]}`,
		result{Text: "a b"}},
	{"chat escapes", EndpointChatCompletions,
		`{"messages":[{"role":"user","content":"line1\nline2\t\"q\" \\ \/ \b\f\r \u00e9 \ud83d\ude00 \u4e2d"}]}`,
		result{Text: "line1\nline2\t\"q\" \\ / \b\f\r é 😀 中"}},
	{"chat lone surrogates", EndpointChatCompletions,
		`{"messages":[{"content":"a\ud800b\udc00c\ud800\u0041\ud83d"}]}`,
		result{Text: "a\uFFFDb\uFFFDc\uFFFDA\uFFFD"}},
	{"chat raw utf8", EndpointChatCompletions,
		`{"messages":[{"content":"中文 😀 ünïcödé"}],"model":"m\u00fc"}`,
		result{Text: "中文 😀 ünïcödé", Model: "mü", HasModel: true}},
	{"chat n", EndpointChatCompletions, `{"messages":[],"n":3}`, result{BatchSize: 3}},
	{"chat n 1", EndpointChatCompletions, `{"messages":[],"n":1}`, result{}},
	{"chat n null", EndpointChatCompletions, `{"n":4,"n":null}`, result{}},
	{"chat logprobs", EndpointChatCompletions, `{"logprobs":true,"stream":false}`, result{Logprobs: true}},
	{"chat duplicate messages last wins", EndpointChatCompletions,
		`{"messages":[{"content":"old"}],"messages":[{"content":"new"}]}`, result{Text: "new"}},
	{"chat duplicate content last wins", EndpointChatCompletions,
		`{"messages":[{"content":"x"},{"content":"old","content":[{"type":"text","text":"new"}]}]}`, result{Text: "x new"}},
	{"chat duplicate part text", EndpointChatCompletions,
		`{"messages":[{"content":[{"type":"text","text":"a","text":"b"},{"type":"text","type":"image"}]}]}`, result{Text: "b"}},
	{"chat escaped keys", EndpointChatCompletions,
		`{"mod\u0065l":"m","m\u0065ssages":[{"c\u006fntent":"hi"}]}`, result{Text: "hi", Model: "m", HasModel: true}},
	{"chat whitespace", EndpointChatCompletions,
		" \n\t{ \"messages\" : [ { \"content\" : \"a\" } , { \"content\" : [ { \"type\" : \"text\" , \"text\" : \"b\" } ] } ] , \"model\" : null } \n",
		result{Text: "a b"}},
	{"chat function and developer", EndpointChatCompletions,
		`{"messages":[{"role":"developer","content":"d"},{"role":"function","name":"f","content":"fn"},{"role":"tool","tool_call_id":"x","content":"t"}]}`,
		result{Text: "d fn t"}},
	{"chat nested skipped values", EndpointChatCompletions,
		`{"tools":[{"type":"function","function":{"name":"f","parameters":{"a":[1,2.5e-3,-0,true,false,null,"s\"}"]}}}],"messages":[{"content":"x","tool_calls":[{"id":"1"}]}]}`,
		result{Text: "x"}},

	// generate
	{"generate text", EndpointGenerate, `{"text":"Hello world","sampling_params":{"max_new_tokens":8},"stream":true}`,
		result{Text: "Hello world", HasText: true, Stream: true}},
	{"generate text escaped", EndpointGenerate, `{"text":"a\"b"}`, result{Text: `a"b`, HasText: true}},
	{"generate text wins over input_ids", EndpointGenerate, `{"input_ids":[[1],[2]],"text":"t"}`,
		result{Text: "t", HasText: true, HasInputIDs: true}},
	{"generate text array", EndpointGenerate, `{"text":["a","","b"]}`, result{Text: "a  b", HasText: true, BatchSize: 3}},
	{"generate input_ids flat", EndpointGenerate, `{"input_ids":[1, 22 ,333],"return_logprob":true}`,
		result{Text: "1 22 333", HasInputIDs: true, Logprobs: true}},
	{"generate input_ids nested", EndpointGenerate, `{"input_ids":[[1,2],[],[3]]}`,
		result{Text: "1 2 3", HasInputIDs: true, BatchSize: 3}},
	{"generate input_ids empty", EndpointGenerate, `{"input_ids":[]}`, result{HasInputIDs: true}},
	{"generate input_ids null", EndpointGenerate, `{"input_ids":null,"text":null}`, result{}},
	{"generate nothing", EndpointGenerate, `{}`, result{}},
	{"generate model", EndpointGenerate, `{"model":"","text":""}`, result{Model: "", HasModel: true, HasText: true}},
	{"generate return_logprob false", EndpointGenerate, `{"return_logprob":false}`, result{}},

	// completions
	{"completions string", EndpointCompletions, `{"model":"m","prompt":"Once upon","logprobs":0}`,
		result{Text: "Once upon", Model: "m", HasModel: true, Logprobs: true}},
	{"completions logprobs null", EndpointCompletions, `{"prompt":"x","logprobs":null}`, result{Text: "x"}},
	{"completions logprobs false still present", EndpointCompletions, `{"logprobs":false}`, result{Logprobs: true}},
	{"completions array", EndpointCompletions, `{"prompt":["a","b\n","c"]}`, result{Text: "a b\n c", BatchSize: 3}},
	{"completions array first empty", EndpointCompletions, `{"prompt":["","b"]}`, result{Text: " b", BatchSize: 2}},
	{"completions token ids", EndpointCompletions, `{"prompt":[1,2,3]}`, result{Text: "1 2 3"}},
	{"completions token id batch", EndpointCompletions, `{"prompt":[[1,2],[3]]}`, result{Text: "1 2 3", BatchSize: 2}},
	{"completions token id batch first empty", EndpointCompletions, `{"prompt":[[],[3]]}`, result{Text: "3", BatchSize: 2}},
	{"completions escaped prompt", EndpointCompletions, `{"prompt":"\u0041\n"}`, result{Text: "A\n"}},
	{"completions empty array", EndpointCompletions, `{"prompt":[]}`, result{}},
	{"completions ignores messages", EndpointCompletions, `{"messages":"whatever","text":5}`, result{}},

	// other
	{"other", EndpointOther, `this is not even JSON`, result{}},
}

func TestParse(t *testing.T) {
	var r Request
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			if err := Parse(tc.ep, []byte(tc.body), &r); err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := tc.expected()
			if got := resultOf(&r); got != want {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
			if r.Endpoint != tc.ep {
				t.Errorf("Endpoint = %v", r.Endpoint)
			}
			if tc.ep == EndpointOther {
				return
			}
			ref, err := refParse(tc.ep, []byte(tc.body))
			if err != nil {
				t.Fatalf("reference: %v", err)
			}
			if ref != want {
				t.Errorf("reference disagrees with the table:\nref  %+v\nwant %+v", ref, want)
			}
			checkSpans(t, []byte(tc.body), &r)
		})
	}
}

// checkSpans verifies End and Fields against encoding/json.
func checkSpans(t *testing.T, body []byte, r *Request) {
	t.Helper()
	if r.End < 0 || r.End >= len(body) || body[r.End] != '}' {
		t.Fatalf("End = %d does not point at '}'", r.End)
	}
	if strings.TrimSpace(string(body[r.End+1:])) != "" {
		t.Fatalf("End = %d is not the last '}'", r.End)
	}
	top, err := entries(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != len(r.Fields) {
		t.Fatalf("%d fields, want %d", len(r.Fields), len(top))
	}
	for i, f := range r.Fields {
		var key string
		if err := json.Unmarshal([]byte(`"`+string(f.Key)+`"`), &key); err != nil {
			t.Fatalf("field %d key %q: %v", i, f.Key, err)
		}
		if key != top[i].k {
			t.Errorf("field %d key %q, want %q", i, key, top[i].k)
		}
		if raw := string(body[f.ValueStart:f.ValueEnd]); raw != string(top[i].v) {
			t.Errorf("field %q raw value %q, want %q", key, raw, top[i].v)
		}
	}
}

func TestFieldsAndEnd(t *testing.T) {
	body := []byte(`{"model" : "m", "messages":[{"role":"user","content":"hi"}],"stream":true, "max_tokens":  16 ,"x\"y":{"a":[1]}}  `)
	var r Request
	if err := Parse(EndpointChatCompletions, body, &r); err != nil {
		t.Fatal(err)
	}
	want := []struct{ key, val string }{
		{"model", `"m"`},
		{"messages", `[{"role":"user","content":"hi"}]`},
		{"stream", "true"},
		{"max_tokens", "16"},
		{`x\"y`, `{"a":[1]}`},
	}
	if len(r.Fields) != len(want) {
		t.Fatalf("got %d fields", len(r.Fields))
	}
	for i, w := range want {
		f := r.Fields[i]
		if string(f.Key) != w.key || string(body[f.ValueStart:f.ValueEnd]) != w.val {
			t.Errorf("field %d = %q:%q, want %q:%q", i, f.Key, body[f.ValueStart:f.ValueEnd], w.key, w.val)
		}
	}
	if r.End != len(body)-3 {
		t.Errorf("End = %d, want %d", r.End, len(body)-3)
	}
	// Splicing a field in front of the closing brace yields valid JSON.
	spliced := append(append(append([]byte{}, body[:r.End]...), `,"bootstrap_room":1`...), body[r.End:]...)
	if !json.Valid(spliced) {
		t.Errorf("spliced body invalid: %s", spliced)
	}
	checkSpans(t, body, &r)

	if err := Parse(EndpointGenerate, []byte(`{}`), &r); err != nil || r.End != 1 || len(r.Fields) != 0 {
		t.Errorf("empty object: err=%v End=%d fields=%d", err, r.End, len(r.Fields))
	}
}

func TestViews(t *testing.T) {
	var r Request
	body := []byte(`{"model":"mm","text":"plain text"}`)
	if err := Parse(EndpointGenerate, body, &r); err != nil {
		t.Fatal(err)
	}
	if &r.Text[0] != &body[22] || &r.Model[0] != &body[10] {
		t.Errorf("Text/Model are not views into the body")
	}
	body = []byte(`{"prompt":"plain"}`)
	if err := Parse(EndpointCompletions, body, &r); err != nil {
		t.Fatal(err)
	}
	if &r.Text[0] != &body[11] {
		t.Errorf("prompt Text is not a view into the body")
	}
}

func TestReuseDoesNotLeak(t *testing.T) {
	var r Request
	if err := Parse(EndpointChatCompletions, []byte(`{"model":"a\u0062","messages":[{"content":"first long text"}],"stream":true,"n":5,"logprobs":true}`), &r); err != nil {
		t.Fatal(err)
	}
	if err := Parse(EndpointChatCompletions, []byte(`{"messages":[{"content":"x"}]}`), &r); err != nil {
		t.Fatal(err)
	}
	if got := resultOf(&r); got != (result{Text: "x", PDText: "x"}) {
		t.Errorf("state leaked: %+v", got)
	}
	if err := Parse(EndpointChatCompletions, []byte(`{"messages":[{"content":"a"}],"stream":"yes"}`), &r); err == nil {
		t.Fatal("want error")
	}
	r.Reset()
	if got := resultOf(&r); got != (result{}) || len(r.Fields) != 0 || r.End != 0 {
		t.Errorf("Reset left state: %+v", got)
	}
}

var errorCases = []struct {
	name string
	ep   Endpoint
	body string
	typ  bool // a type error rather than a syntax error
}{
	{"empty", EndpointChatCompletions, ``, false},
	{"whitespace", EndpointChatCompletions, "  \n", false},
	{"array", EndpointChatCompletions, `[]`, false},
	{"string", EndpointGenerate, `"x"`, false},
	{"null", EndpointCompletions, `null`, false},
	{"truncated object", EndpointChatCompletions, `{"messages":[{"content":"hi"}]`, false},
	{"truncated string", EndpointChatCompletions, `{"messages":[{"content":"hi`, false},
	{"truncated key", EndpointGenerate, `{"te`, false},
	{"truncated after colon", EndpointGenerate, `{"text":`, false},
	{"truncated literal", EndpointGenerate, `{"stream":tru`, false},
	{"truncated number", EndpointGenerate, `{"x":-`, false},
	{"truncated escape", EndpointGenerate, `{"text":"a\`, false},
	{"trailing garbage", EndpointChatCompletions, `{"messages":[]} x`, false},
	{"two objects", EndpointChatCompletions, `{}{}`, false},
	{"trailing comma object", EndpointChatCompletions, `{"a":1,}`, false},
	{"trailing comma array", EndpointChatCompletions, `{"messages":[{"content":"a"},]}`, false},
	{"trailing comma skipped array", EndpointChatCompletions, `{"x":[1,]}`, false},
	{"missing colon", EndpointChatCompletions, `{"a" 1}`, false},
	{"missing comma", EndpointChatCompletions, `{"a":1 "b":2}`, false},
	{"unquoted key", EndpointChatCompletions, `{a:1}`, false},
	{"single quotes", EndpointChatCompletions, `{'a':1}`, false},
	{"bad escape", EndpointChatCompletions, `{"messages":[{"content":"a\qb"}]}`, false},
	{"bad escape skipped", EndpointChatCompletions, `{"x":"\x41"}`, false},
	{"bad escape in key", EndpointChatCompletions, `{"\a":1}`, false},
	{"bad unicode escape", EndpointChatCompletions, `{"messages":[{"content":"\u12G4"}]}`, false},
	{"short unicode escape", EndpointGenerate, `{"text":"\u12"}`, false},
	{"leading zero", EndpointChatCompletions, `{"x":01}`, false},
	{"bad fraction", EndpointChatCompletions, `{"x":1.}`, false},
	{"bad exponent", EndpointChatCompletions, `{"x":1e}`, false},
	{"plus number", EndpointChatCompletions, `{"x":+1}`, false},
	{"bad literal", EndpointChatCompletions, `{"x":nul}`, false},
	{"literal suffix", EndpointChatCompletions, `{"stream":truex}`, false},
	{"unclosed nested", EndpointChatCompletions, `{"x":{"y":[1,2}}`, false},
	{"deep nesting", EndpointChatCompletions, `{"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, false},
	{"bad input_ids number", EndpointGenerate, `{"input_ids":[1,2x]}`, false},

	{"messages not array", EndpointChatCompletions, `{"messages":"hi"}`, true},
	{"message not object", EndpointChatCompletions, `{"messages":["hi"]}`, true},
	{"content number", EndpointChatCompletions, `{"messages":[{"content":5}]}`, true},
	{"content object", EndpointChatCompletions, `{"messages":[{"content":{"text":"x"}}]}`, true},
	{"part not object", EndpointChatCompletions, `{"messages":[{"content":["x"]}]}`, true},
	{"part type number", EndpointChatCompletions, `{"messages":[{"content":[{"type":1}]}]}`, true},
	{"text part text number", EndpointChatCompletions, `{"messages":[{"content":[{"text":1,"type":"text"}]}]}`, true},
	{"role number", EndpointChatCompletions, `{"messages":[{"role":1}]}`, true},
	{"reasoning number", EndpointChatCompletions, `{"messages":[{"reasoning_content":[]}]}`, true},
	{"stream string", EndpointChatCompletions, `{"stream":"true"}`, true},
	{"stream number", EndpointGenerate, `{"stream":1}`, true},
	{"model number", EndpointCompletions, `{"model":1}`, true},
	{"chat logprobs number", EndpointChatCompletions, `{"logprobs":1}`, true},
	{"return_logprob string", EndpointGenerate, `{"return_logprob":"yes"}`, true},
	{"n float", EndpointChatCompletions, `{"n":2.0}`, true},
	{"n string", EndpointChatCompletions, `{"n":"2"}`, true},
	{"n huge", EndpointChatCompletions, `{"n":99999999999999999999}`, true},
	{"text number", EndpointGenerate, `{"text":1}`, true},
	{"text array of numbers", EndpointGenerate, `{"text":[1]}`, true},
	{"input_ids string", EndpointGenerate, `{"input_ids":"1 2"}`, true},
	{"input_ids strings", EndpointGenerate, `{"input_ids":["1"]}`, true},
	{"input_ids mixed", EndpointGenerate, `{"input_ids":[1,[2]]}`, true},
	{"input_ids too deep", EndpointGenerate, `{"input_ids":[[[1]]]}`, true},
	{"prompt mixed", EndpointCompletions, `{"prompt":["a",1]}`, true},
	{"prompt object", EndpointCompletions, `{"prompt":{}}`, true},
	{"prompt bool", EndpointCompletions, `{"prompt":true}`, true},
	{"overwritten bad messages still rejected", EndpointChatCompletions, `{"messages":[1],"messages":[]}`, true},
}

func TestParseErrors(t *testing.T) {
	var r Request
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			err := Parse(tc.ep, []byte(tc.body), &r)
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("Parse returned %v, want *Error", err)
			}
			if pe.Offset < 0 || pe.Offset > len(tc.body) {
				t.Errorf("offset %d out of range", pe.Offset)
			}
			prefix := "invalid JSON at offset "
			if tc.typ {
				prefix = "invalid request at offset "
			}
			if !strings.HasPrefix(pe.Error(), prefix) {
				t.Errorf("message %q, want prefix %q", pe.Error(), prefix)
			}
			_, rerr := refParse(tc.ep, []byte(tc.body))
			if rerr == nil {
				t.Errorf("reference accepts it")
			}
		})
	}
}

func TestLenient(t *testing.T) {
	var r Request
	// Raw control characters and invalid UTF-8 inside strings are accepted.
	body := []byte("{\"messages\":[{\"content\":\"a\x01b\tc\xff\"}]}")
	if err := Parse(EndpointChatCompletions, body, &r); err != nil {
		t.Fatal(err)
	}
	if string(r.Text) != "a\x01b\tc\xff" {
		t.Errorf("Text = %q", r.Text)
	}
}

func TestWriteError(t *testing.T) {
	w := httptest.NewRecorder()
	WriteError(w, 400, "invalid_request_error", "invalid_json", `invalid JSON at offset 3: "x"`)
	if w.Code != 400 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d content-type %q", w.Code, w.Header().Get("Content-Type"))
	}
	var got map[string]map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	e := got["error"]
	if e["message"] != `invalid JSON at offset 3: "x"` || e["type"] != "invalid_request_error" || e["code"] != "invalid_json" {
		t.Errorf("body %s", w.Body.String())
	}
	if v, ok := e["param"]; !ok || v != nil {
		t.Errorf("param = %v, %v", v, ok)
	}
	w = httptest.NewRecorder()
	WriteError(w, 503, "service_unavailable", "", "no workers")
	if !strings.Contains(w.Body.String(), `"code":null`) || w.Code != 503 {
		t.Errorf("body %s", w.Body.String())
	}
}

func TestZeroAllocs(t *testing.T) {
	body := chatBody(32 << 10)
	var r Request
	if err := Parse(EndpointChatCompletions, body, &r); err != nil {
		t.Fatal(err)
	}
	bodies := map[Endpoint][]byte{
		EndpointChatCompletions: body,
		EndpointGenerate:        []byte(`{"model":"m\u0031","text":["a\nb","c"],"input_ids":[[1,2],[3]],"stream":true}`),
		EndpointCompletions:     []byte(`{"prompt":[[1,2],[3]],"logprobs":1,"mod\u0065l":"x"}`),
	}
	for ep, b := range bodies {
		if err := Parse(ep, b, &r); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(20, func() { _ = Parse(ep, b, &r) }); n != 0 {
			t.Errorf("%v: %v allocs per Parse", ep, n)
		}
	}
}

// FuzzParseAgainstEncodingJSON compares Parse with the encoding/json based
// reference implementation.
func FuzzParseAgainstEncodingJSON(f *testing.F) {
	for _, tc := range parseCases {
		if tc.ep != EndpointOther {
			f.Add(uint8(tc.ep), []byte(tc.body))
		}
	}
	for _, tc := range errorCases {
		if len(tc.body) < 1000 {
			f.Add(uint8(tc.ep), []byte(tc.body))
		}
	}
	f.Add(uint8(EndpointChatCompletions), chatBody(400))
	f.Add(uint8(EndpointChatCompletions), []byte("{\"messages\":[{\"content\":\"\xff\xfe\x01\"}]}"))
	f.Fuzz(func(t *testing.T, epb uint8, body []byte) {
		ep := Endpoint(epb%3 + 1)
		var r Request
		err := Parse(ep, body, &r)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not *Error", err)
			}
			if pe.Offset < 0 || pe.Offset > len(body) {
				t.Fatalf("offset %d out of range", pe.Offset)
			}
		}
		ref, rerr := refParse(ep, body)
		if errors.Is(rerr, errRefSyntax) {
			// Allow the documented leniency: raw control characters in strings.
			esc := escapeControls(body)
			ref, rerr = refParse(ep, esc)
			if errors.Is(rerr, errRefSyntax) {
				if err == nil {
					t.Fatalf("Parse accepted a body encoding/json rejects: %q", body)
				}
				return
			}
		}
		if rerr != nil {
			if err == nil {
				t.Fatalf("Parse accepted a body with a type error (%v): %q", rerr, body)
			}
			return
		}
		if err != nil {
			t.Fatalf("Parse rejected a valid body: %v\n%q", err, body)
		}
		got, want := normalizeResult(resultOf(&r)), normalizeResult(ref)
		if got != want {
			t.Fatalf("mismatch for %q\ngot  %+v\nwant %+v", body, got, want)
		}
		if json.Valid(body) {
			checkSpans(t, body, &r)
		}
	})
}

func TestNextSpecial(t *testing.T) {
	// Deterministic pseudo-random strings over an alphabet with quotes,
	// backslashes and high bytes, of lengths around the SWAR boundaries.
	x := uint32(12345)
	rnd := func(n uint32) uint32 { x = x*1664525 + 1013904223; return (x >> 8) % n }
	alphabet := []byte{'a', 'b', ' ', '"', '\\', 0x80, 0xff, 0x22 ^ 0x80, 0x5c ^ 0x80, 0x21, 0x23, 0x5b, 0x5d}
	for trial := 0; trial < 3000; trial++ {
		n := int(rnd(300))
		density := rnd(200) + 1
		b := make([]byte, n)
		for k := range b {
			if rnd(density) == 0 {
				b[k] = alphabet[3+rnd(2)]
			} else {
				b[k] = alphabet[[]uint32{0, 1, 2, 5, 6, 7, 8, 9, 10, 11, 12}[rnd(11)]]
			}
		}
		i, q := 0, -1
		for i <= n {
			var j int
			j, q = nextSpecial(b, i, q)
			want := -1
			for k := i; k < n; k++ {
				if b[k] == '"' || b[k] == '\\' {
					want = k
					break
				}
			}
			if j != want {
				t.Fatalf("trial %d: nextSpecial(%q, %d) = %d, want %d", trial, b, i, j, want)
			}
			if j < 0 {
				break
			}
			i = j + 1 + int(rnd(2))
		}
	}
}

func TestLargeBodiesAgainstReference(t *testing.T) {
	long := strings.Repeat(`\"`, 100000) + strings.Repeat("x", 1<<20) + `\n\u00e9`
	bodies := [][]byte{
		chatBody(1 << 10), chatBody(32 << 10), chatBody(220 << 10),
		[]byte(`{"messages":[{"role":"user","content":"` + long + `"},{"role":"assistant","content":"` + long + `","reasoning_content":"` + long + `"}]}`),
	}
	var r Request
	for _, body := range bodies {
		if err := Parse(EndpointChatCompletions, body, &r); err != nil {
			t.Fatal(err)
		}
		ref, err := refParse(EndpointChatCompletions, body)
		if err != nil {
			t.Fatal(err)
		}
		if got := resultOf(&r); got != ref {
			t.Errorf("%d-byte body: mismatch (text %d vs %d bytes)", len(body), len(got.Text), len(ref.Text))
		}
		checkSpans(t, body, &r)
	}
}
