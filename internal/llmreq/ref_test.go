package llmreq

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// This file holds a slow reference implementation of the Parse rules built on
// encoding/json, used by the table tests and the fuzz test.

type result struct {
	Text        string
	PDText      string
	Model       string
	HasModel    bool
	Stream      bool
	Logprobs    bool
	BatchSize   int
	HasText     bool
	HasInputIDs bool
}

func resultOf(r *Request) result {
	return result{
		Text:        string(r.Text),
		PDText:      string(r.PDText),
		Model:       string(r.Model),
		HasModel:    r.Model != nil,
		Stream:      r.Stream,
		Logprobs:    r.Logprobs,
		BatchSize:   r.BatchSize,
		HasText:     r.HasText,
		HasInputIDs: r.HasInputIDs,
	}
}

var (
	errRefSyntax = errors.New("syntax")
	errRefType   = errors.New("type")
)

type kv struct {
	k string
	v json.RawMessage
}

// entries decodes a JSON object into its members in order (duplicates kept).
func entries(raw []byte) ([]kv, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return nil, errRefType
	}
	var out []kv
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, kv{t.(string), bytes.TrimSpace(v)})
	}
	return out, nil
}

func elems(raw []byte) []json.RawMessage {
	var out []json.RawMessage
	if err := json.Unmarshal(raw, &out); err != nil {
		panic(err)
	}
	for i := range out {
		out[i] = bytes.TrimSpace(out[i])
	}
	return out
}

func isNullRaw(v []byte) bool { return string(v) == "null" }

func kindOf(v []byte) byte {
	switch v[0] {
	case '"', '[', '{', 't', 'f', 'n':
		return v[0]
	}
	return '0'
}

func str(v []byte) string {
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		panic(err)
	}
	return s
}

// refList mirrors parseList: all elements of one allowed kind.
func refList(v []byte, allowStr, allowNum, allowArr bool) (parts []string, n int, kind byte, err error) {
	parts, n, kind, _, err = refList2(v, allowStr, allowNum, allowArr)
	return
}

// refList2 also returns how many of parts came from the first element.
func refList2(v []byte, allowStr, allowNum, allowArr bool) (parts []string, n int, kind byte, first int, err error) {
	var nums []string
	for _, e := range elems(v) {
		k := kindOf(e)
		if kind != 0 && k != kind {
			return nil, 0, 0, 0, errRefType
		}
		kind = k
		switch {
		case k == '"' && allowStr:
			parts = append(parts, str(e))
		case k == '0' && allowNum:
			nums = append(nums, string(e))
		case k == '[' && allowArr:
			for _, x := range elems(e) {
				if kindOf(x) != '0' {
					return nil, 0, 0, 0, errRefType
				}
				nums = append(nums, string(x))
			}
		default:
			return nil, 0, 0, 0, errRefType
		}
		if n == 0 {
			first = len(parts) + len(nums)
		}
		n++
	}
	if kind != '"' {
		parts = nums
	}
	return parts, n, kind, first, nil
}

// refParse implements the Parse rules with encoding/json. It returns
// errRefSyntax for bodies encoding/json rejects or that are not objects and
// errRefType for type errors.
func refParse(ep Endpoint, body []byte) (result, error) {
	var res result
	if !json.Valid(body) {
		return res, errRefSyntax
	}
	if t := bytes.TrimLeft(body, " \t\r\n"); t[0] != '{' {
		return res, errRefSyntax
	}
	top, err := entries(body)
	if err != nil {
		panic(err)
	}
	var (
		text       string
		pdText     string
		textSet    bool
		textBatch  int
		ids        string
		idsSet     bool
		idsBatch   int
		chatPieces []string
	)
	for _, f := range top {
		v := f.v
		null := isNullRaw(v)
		switch f.k {
		case "model":
			res.Model, res.HasModel = "", false
			if null {
				continue
			}
			if kindOf(v) != '"' {
				return res, errRefType
			}
			res.Model, res.HasModel = str(v), true
			continue
		case "stream":
			res.Stream = false
			if null {
				continue
			}
			if kindOf(v) != 't' && kindOf(v) != 'f' {
				return res, errRefType
			}
			res.Stream = string(v) == "true"
			continue
		}
		switch ep {
		case EndpointGenerate:
			switch f.k {
			case "return_logprob":
				if !null && kindOf(v) != 't' && kindOf(v) != 'f' {
					return res, errRefType
				}
				res.Logprobs = string(v) == "true"
			case "text":
				text, textSet, textBatch = "", false, 0
				if null {
					continue
				}
				switch kindOf(v) {
				case '"':
					text, textSet = str(v), true
				case '[':
					parts, n, _, err := refList(v, true, false, false)
					if err != nil {
						return res, err
					}
					text, textSet, textBatch = strings.Join(parts, " "), true, n
				default:
					return res, errRefType
				}
			case "input_ids":
				ids, idsSet, idsBatch = "", false, 0
				if null {
					continue
				}
				if kindOf(v) != '[' {
					return res, errRefType
				}
				parts, n, kind, err := refList(v, false, true, true)
				if err != nil {
					return res, err
				}
				ids, idsSet = strings.Join(parts, " "), true
				if kind == '[' {
					idsBatch = n
				}
			}
		case EndpointCompletions:
			switch f.k {
			case "logprobs":
				res.Logprobs = !null
			case "prompt":
				text, textSet, textBatch, pdText = "", false, 0, ""
				if null {
					continue
				}
				switch kindOf(v) {
				case '"':
					text, textSet = str(v), true
					pdText = text
				case '[':
					parts, n, kind, first, err := refList2(v, true, true, true)
					if err != nil {
						return res, err
					}
					text, textSet = strings.Join(parts, " "), true
					pdText = text
					if kind == '"' || kind == '[' {
						textBatch = n
						pdText = strings.Join(parts[:first], " ")
					}
				default:
					return res, errRefType
				}
			}
		case EndpointChatCompletions:
			switch f.k {
			case "logprobs":
				if !null && kindOf(v) != 't' && kindOf(v) != 'f' {
					return res, errRefType
				}
				res.Logprobs = string(v) == "true"
			case "n":
				res.BatchSize = 0
				if null {
					continue
				}
				if kindOf(v) != '0' {
					return res, errRefType
				}
				n, err := strconv.ParseInt(string(v), 10, 64)
				if err != nil {
					return res, errRefType
				}
				if n > 1 {
					res.BatchSize = int(n)
				}
			case "messages":
				chatPieces = nil
				if null {
					continue
				}
				if kindOf(v) != '[' {
					return res, errRefType
				}
				for _, m := range elems(v) {
					pieces, err := refMessage(m)
					if err != nil {
						return res, err
					}
					chatPieces = append(chatPieces, pieces...)
				}
			}
		}
	}
	switch ep {
	case EndpointGenerate:
		res.HasText, res.HasInputIDs = textSet, idsSet
		if textSet {
			res.Text, res.BatchSize, res.PDText = text, textBatch, text
		} else if idsSet {
			res.Text, res.BatchSize = ids, idsBatch
		}
	case EndpointCompletions:
		res.Text, res.BatchSize, res.PDText = text, textBatch, pdText
	case EndpointChatCompletions:
		res.Text = strings.Join(chatPieces, " ")
		res.PDText = res.Text
	}
	return res, nil
}

func refMessage(m []byte) ([]string, error) {
	if kindOf(m) != '{' {
		return nil, errRefType
	}
	fields, err := entries(m)
	if err != nil {
		panic(err)
	}
	var (
		assistant bool
		content   []string
		reasoning string
	)
	for _, f := range fields {
		v := f.v
		null := isNullRaw(v)
		switch f.k {
		case "role":
			assistant = false
			if null {
				continue
			}
			if kindOf(v) != '"' {
				return nil, errRefType
			}
			assistant = str(v) == "assistant"
		case "reasoning_content":
			reasoning = ""
			if null {
				continue
			}
			if kindOf(v) != '"' {
				return nil, errRefType
			}
			reasoning = str(v)
		case "content":
			content = nil
			if null {
				continue
			}
			switch kindOf(v) {
			case '"':
				content = append(content, str(v))
			case '[':
				for _, part := range elems(v) {
					if kindOf(part) != '{' {
						return nil, errRefType
					}
					pf, err := entries(part)
					if err != nil {
						panic(err)
					}
					isText, ptext, bad := false, "", false
					for _, g := range pf {
						switch g.k {
						case "type":
							isText = false
							if isNullRaw(g.v) {
								continue
							}
							if kindOf(g.v) != '"' {
								return nil, errRefType
							}
							isText = str(g.v) == "text"
						case "text":
							ptext, bad = "", false
							switch {
							case isNullRaw(g.v):
							case kindOf(g.v) == '"':
								ptext = str(g.v)
							default:
								bad = true
							}
						}
					}
					if isText {
						if bad {
							return nil, errRefType
						}
						content = append(content, ptext)
					}
				}
			default:
				return nil, errRefType
			}
		}
	}
	if assistant {
		content = append(content, reasoning)
	}
	var out []string
	for _, s := range content {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// normalizeUTF8 maps invalid UTF-8 to U+FFFD and collapses runs of U+FFFD so
// that encoding/json's per-byte replacement and the parser's pass-through
// compare equal.
func normalizeUTF8(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	for strings.Contains(s, "\uFFFD\uFFFD") {
		s = strings.ReplaceAll(s, "\uFFFD\uFFFD", "\uFFFD")
	}
	return s
}

func normalizeResult(r result) result {
	r.Text = normalizeUTF8(r.Text)
	r.PDText = normalizeUTF8(r.PDText)
	r.Model = normalizeUTF8(r.Model)
	return r
}

// escapeControls rewrites raw control characters inside strings as \u00XX
// escapes (which decode to the same bytes), so that a body that is only
// invalid because of the documented leniency becomes valid for encoding/json.
func escapeControls(b []byte) []byte {
	var out []byte
	in := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case !in:
			if c == '"' {
				in = true
			}
		case c == '\\':
			out = append(out, c)
			if i+1 < len(b) {
				i++
				c = b[i]
			}
		case c == '"':
			in = false
		case c < 0x20:
			out = append(out, `\u00`...)
			out = append(out, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
			continue
		}
		out = append(out, c)
	}
	return out
}
