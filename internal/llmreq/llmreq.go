// Package llmreq parses the JSON body of an LLM inference request exactly once
// and extracts what the gateway needs for routing: the routing text (SGLang
// gateway spec §1 step 1, and the PD variant of §7.2), the model, the stream
// and logprobs flags, the PD batch size (§7.3) and the byte spans of every
// top-level field, so that a later handler can splice fields into the body
// without re-encoding it.
//
// The parser is a hand-written single-pass scanner over the top-level object.
// Values it does not need are skipped by a validating skipper. String ends
// and escapes are found with an 8-bytes-at-a-time (SWAR) scan for short
// distances and bytes.IndexByte (vectorized memchr) for long runs, in linear
// time however many escapes a string has. Results are views into the body
// when possible; otherwise they live in buffers owned by the Request and
// reused by the next Parse, so a warmed-up Request parses without allocating.
// A Request is not safe for concurrent use.
//
// # Validation
//
// For the supported endpoints the whole body is validated as JSON (RFC 8259
// grammar; nesting limited to 10000 levels, like encoding/json), with two
// documented leniencies:
//
//   - raw control characters (bytes < 0x20) inside strings are accepted and
//     passed through (encoding/json rejects them);
//   - invalid UTF-8 is accepted and passed through unchanged into Text and
//     Model (encoding/json accepts it too, but replaces it with U+FFFD).
//
// Lone or invalid UTF-16 surrogates in \u escapes decode to U+FFFD exactly as
// encoding/json does. Duplicate keys: the last occurrence wins (as with
// encoding/json), but every occurrence is type-checked and Fields lists every
// occurrence.
//
// A JSON null for any field read by the parser is treated as if the field
// were absent. A value of the wrong type for a field the parser reads is an
// error (see Parse).
package llmreq

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"net/http"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Endpoint identifies the inference API a request body belongs to; it selects
// the routing-text rules.
type Endpoint uint8

// Supported endpoints.
const (
	// EndpointOther is any path the parser does not understand; Parse does nothing for it.
	EndpointOther Endpoint = iota
	// EndpointGenerate is SGLang's native POST /generate.
	EndpointGenerate
	// EndpointCompletions is POST /v1/completions.
	EndpointCompletions
	// EndpointChatCompletions is POST /v1/chat/completions.
	EndpointChatCompletions
)

// EndpointOf maps a request path to an Endpoint. It matches "/generate",
// "/v1/completions" and "/v1/chat/completions" exactly, optionally followed by
// one trailing "/". Anything else is EndpointOther.
func EndpointOf(path string) Endpoint {
	if n := len(path); n > 1 && path[n-1] == '/' {
		path = path[:n-1]
	}
	switch path {
	case "/generate":
		return EndpointGenerate
	case "/v1/completions":
		return EndpointCompletions
	case "/v1/chat/completions":
		return EndpointChatCompletions
	}
	return EndpointOther
}

// String returns "generate", "completions", "chat" or "other".
func (e Endpoint) String() string {
	switch e {
	case EndpointGenerate:
		return "generate"
	case EndpointCompletions:
		return "completions"
	case EndpointChatCompletions:
		return "chat"
	}
	return "other"
}

// Field is one top-level key of the request object with the byte span of its
// raw value: body[ValueStart:ValueEnd] is the value exactly as sent (no
// surrounding whitespace).
type Field struct {
	// Key is a view into the body of the key between its quotes; it is raw,
	// so it still contains escapes if the client escaped the key.
	Key []byte
	// ValueStart is the offset of the first byte of the value.
	ValueStart int
	// ValueEnd is the offset just past the last byte of the value.
	ValueEnd int
}

// Request is the result of Parse. A Request can be reused for many parses;
// its slices are only valid until the next Parse or Reset, and views point
// into the body passed to Parse (so the body must not be modified while they
// are in use).
type Request struct {
	// Endpoint is the endpoint the body was parsed for.
	Endpoint Endpoint
	// Model is the "model" string (unescaped). It is a view into the body when
	// no unescaping was needed, else it points into a buffer owned by the
	// Request. nil if the field is absent or null.
	Model []byte
	// Stream is "stream": true.
	Stream bool
	// Logprobs is, for /generate, "return_logprob": true; for chat,
	// "logprobs": true; for completions, "logprobs" present and not null.
	Logprobs bool
	// Text is the routing text (spec §1 step 1), unescaped:
	//   - /generate: "text" if present (a string; an array of strings is
	//     joined by ' '), else "input_ids" as its raw JSON numbers joined by
	//     single spaces (a list of lists is flattened), else empty.
	//   - chat: every message in order, joined by ' ': string content, or for
	//     array content only the text parts ({"type":"text","text":...});
	//     for role "assistant", "content" then "reasoning_content". Empty
	//     pieces are skipped (the separator is only placed between non-empty
	//     pieces).
	//   - completions: "prompt" if a string; an array of strings joined by ' '
	//     (empty elements are kept, as a plain join does); a token-id array or
	//     an array of token-id arrays: the numbers joined by single spaces.
	// Text is a view into the body when it is a single string that needed no
	// unescaping, otherwise it points into a buffer owned by the Request.
	// It may be nil or empty when there is no text.
	Text []byte
	// PDText is the routing text under the PD-mode rules (spec §7.2):
	//   - /generate: "text" only (nil when only "input_ids" is present);
	//   - chat: the same as Text;
	//   - completions: the prompt string, or only the first element of an
	//     array of strings (or the first list of an array of token-id lists;
	//     a flat token-id array is one prompt, so all of it).
	// It aliases Text (or a prefix of it).
	PDText []byte
	// HasText reports that /generate had a non-null "text".
	HasText bool
	// HasInputIDs reports that /generate had a non-null "input_ids".
	HasInputIDs bool
	// BatchSize is the PD batch size for bootstrap injection (spec §7.3); 0
	// means a single (non-batch) request:
	//   - /generate: if "text" is present, its length when it is an array;
	//     otherwise the number of lists when "input_ids" is a list of lists.
	//   - chat: "n" when n > 1 (not capped: callers should bound it).
	//   - completions: the array length when "prompt" is an array of strings
	//     or an array of token-id arrays (a flat token-id array is a single
	//     prompt, so 0).
	BatchSize int
	// End is the offset of the closing '}' of the top-level object.
	End int
	// Fields lists every top-level key in body order (duplicates included)
	// with the span of its raw value. The slice is reused across parses.
	Fields []Field

	buf      []byte // joined text (chat, arrays, unescaped single strings)
	ids      []byte // /generate input_ids text
	modelBuf []byte // unescaped model
	keyBuf   []byte // unescaped keys
	scratch  []byte // unescaped short values (role, type)
}

// Reset clears the parse results but keeps the buffers for reuse.
func (r *Request) Reset() {
	*r = Request{
		Fields:   r.Fields[:0],
		buf:      r.buf[:0],
		ids:      r.ids[:0],
		modelBuf: r.modelBuf[:0],
		keyBuf:   r.keyBuf[:0],
		scratch:  r.scratch[:0],
	}
}

// Error is returned by Parse for a malformed body. Msg is safe to show to the
// client.
type Error struct {
	// Msg is a user-facing message, e.g. "invalid JSON at offset 123: ...".
	Msg string
	// Offset is the byte offset in the body where the problem was detected.
	Offset int
}

// Error returns Msg.
func (e *Error) Error() string { return e.Msg }

// maxDepth is the maximum nesting depth, the same as encoding/json's.
const maxDepth = 10000

// Parse parses body for endpoint ep into r, reusing r's buffers. Views in r
// point into body.
//
// For EndpointOther, Parse only resets r, sets r.Endpoint and returns nil: it
// neither validates nor records anything (the gateway passes such bodies
// through untouched).
//
// For the other endpoints it returns a *Error when the body is not a single
// JSON object (syntax errors, truncation, trailing non-whitespace), or when a
// field it reads has the wrong type: "model" not a string; "stream",
// "return_logprob" or chat "logprobs" not a boolean; /generate "text" not a
// string or array of strings; "input_ids" not an array of numbers or of
// arrays of numbers; "prompt" not a string, or an array whose elements are not
// all strings, all numbers or all arrays of numbers; "messages" not an array
// of objects; a message "role" or "reasoning_content" not a string; a
// "content" not a string or an array of objects; a content part "type" not a
// string; the "text" of a "text" part not a string; chat "n" not an integer.
// In all of these null counts as absent. After an error the contents of r
// (other than Endpoint) are unspecified.
func Parse(ep Endpoint, body []byte, r *Request) error {
	r.Reset()
	r.Endpoint = ep
	if ep == EndpointOther {
		return nil
	}
	p := parser{b: body, r: r, ep: ep}
	return p.parseTop()
}

type parser struct {
	b     []byte
	r     *Request
	ep    Endpoint
	depth int

	// /generate and completions state
	text      []byte // the single-string value or r.buf
	textSet   bool
	textBatch int
	textFirst int // length of the first element's text in r.buf (arrays)
	firstLen  int // set by parseList: len(dst) after its first element
	idsSet    bool
	idsBatch  int
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (p *parser) ws(i int) int {
	b := p.b
	for i < len(b) && isWS(b[i]) {
		i++
	}
	return i
}

func syntaxError(off int, msg string) *Error {
	return &Error{Msg: "invalid JSON at offset " + strconv.Itoa(off) + ": " + msg, Offset: off}
}

func typeError(off int, msg string) *Error {
	return &Error{Msg: "invalid request at offset " + strconv.Itoa(off) + ": " + msg, Offset: off}
}

// unexpected reports a syntax error at i, which does not hold what was expected.
func (p *parser) unexpected(i int, expected string) *Error {
	if i >= len(p.b) {
		return syntaxError(i, "unexpected end of input, expected "+expected)
	}
	return syntaxError(i, "unexpected character "+strconv.QuoteRune(rune(p.b[i]))+", expected "+expected)
}

func isValueStart(c byte) bool {
	switch c {
	case '"', '{', '[', 't', 'f', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	}
	return false
}

// wrongType returns a type error when i holds the start of some JSON value,
// else a syntax error.
func (p *parser) wrongType(i int, msg string) *Error {
	if i < len(p.b) && isValueStart(p.b[i]) {
		return typeError(i, msg)
	}
	return p.unexpected(i, "value")
}

func (p *parser) isNull(i int) bool {
	b := p.b
	return i+4 <= len(b) && b[i] == 'n' && b[i+1] == 'u' && b[i+2] == 'l' && b[i+3] == 'l'
}

func (p *parser) enter(i int) error {
	p.depth++
	if p.depth > maxDepth {
		return syntaxError(i, "exceeded max depth")
	}
	return nil
}

// after is called after a value inside a container closed by end; it returns
// the start of the next element (done=false) or the index past end (done=true).
func (p *parser) after(i int, end byte) (int, bool, error) {
	i = p.ws(i)
	if i < len(p.b) {
		switch p.b[i] {
		case ',':
			return p.ws(i + 1), false, nil
		case end:
			return i + 1, true, nil
		}
	}
	if end == '}' {
		return i, false, p.unexpected(i, "',' or '}'")
	}
	return i, false, p.unexpected(i, "',' or ']'")
}

// key reads an object key at i (which must be '"'). It returns the raw key,
// the unescaped key (raw itself when not escaped) and the start of the value.
func (p *parser) key(i int) (raw, key []byte, vi int, err error) {
	b := p.b
	if i >= len(b) || b[i] != '"' {
		return nil, nil, i, p.unexpected(i, "string key")
	}
	end, esc, err := p.scanString(i + 1)
	if err != nil {
		return nil, nil, i, err
	}
	raw = b[i+1 : end]
	key = raw
	if esc {
		p.r.keyBuf, _, _ = p.appendString(p.r.keyBuf[:0], i+1)
		key = p.r.keyBuf
	}
	j := p.ws(end + 1)
	if j >= len(b) || b[j] != ':' {
		return nil, nil, j, p.unexpected(j, "':'")
	}
	return raw, key, p.ws(j + 1), nil
}

// equalString reports whether the already validated string starting at s
// (after its opening quote) and closing at end equals want after unescaping.
func (p *parser) equalString(s, end int, esc bool, want string) bool {
	if !esc {
		return string(p.b[s:end]) == want
	}
	p.r.scratch, _, _ = p.appendString(p.r.scratch[:0], s)
	return string(p.r.scratch) == want
}

const (
	lo8 = 0x0101010101010101
	hi8 = 0x8080808080808080
	// swarLimit is how many bytes nextSpecial scans with SWAR before it
	// switches to bytes.IndexByte.
	swarLimit = 16
)

// nextSpecial returns the index of the first '"' or '\\' at or after i, or
// -1 if there is none. q caches the position of the next '"' (valid when
// q >= i; pass -1 initially) so that long strings with many escapes are still
// scanned in linear time; the updated cache is returned.
//
// Short distances are scanned 8 bytes at a time (SWAR) to avoid the call
// overhead of bytes.IndexByte; after 64 bytes without a hit it switches to
// bytes.IndexByte (vectorized memchr) for the quote and then the backslash.
func nextSpecial(b []byte, i, q int) (int, int) {
	end := i + swarLimit
	if end > len(b) {
		end = len(b)
	}
	j := i
	for ; j+8 <= end; j += 8 {
		x := binary.LittleEndian.Uint64(b[j:])
		a := x ^ (lo8 * '"')
		c := x ^ (lo8 * '\\')
		// A zero byte in a or c marks a match; the lowest flagged byte is exact.
		if m := (((a - lo8) &^ a) | ((c - lo8) &^ c)) & hi8; m != 0 {
			return j + bits.TrailingZeros64(m)>>3, q
		}
	}
	if end == len(b) {
		for ; j < end; j++ {
			if c := b[j]; c == '"' || c == '\\' {
				return j, q
			}
		}
		return -1, q
	}
	if q < j {
		// No quote in [i, j): the SWAR loop checked it.
		if k := bytes.IndexByte(b[j:], '"'); k >= 0 {
			q = j + k
		} else {
			q = len(b)
		}
	}
	if k := bytes.IndexByte(b[j:q], '\\'); k >= 0 {
		return j + k, q
	}
	if q == len(b) {
		return -1, q
	}
	return q, q
}

// scanString validates the string whose content starts at i (just after the
// opening quote). It returns the index of the closing quote and whether the
// string contains escapes.
func (p *parser) scanString(i int) (int, bool, error) {
	b := p.b
	esc := false
	q := -1
	for {
		var j int
		j, q = nextSpecial(b, i, q)
		if j < 0 {
			return len(b), esc, syntaxError(len(b), "unterminated string")
		}
		if b[j] == '"' {
			return j, esc, nil
		}
		esc = true
		j++
		if j >= len(b) {
			return len(b), esc, syntaxError(len(b), "unterminated string")
		}
		switch b[j] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i = j + 1
		case 'u':
			if _, ok := hex4(b, j+1); !ok {
				return j, esc, syntaxError(j-1, "invalid \\u escape")
			}
			i = j + 5
		default:
			return j, esc, syntaxError(j-1, "invalid escape "+strconv.Quote(string(b[j-1:j+1])))
		}
	}
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// appendString appends the unescaped content of the string starting at i
// (just after the opening quote) to dst and returns the index of the closing
// quote. It validates like scanString.
func (p *parser) appendString(dst []byte, i int) ([]byte, int, error) {
	b := p.b
	q := -1
	for {
		var j int
		j, q = nextSpecial(b, i, q)
		if j < 0 {
			return dst, len(b), syntaxError(len(b), "unterminated string")
		}
		dst = append(dst, b[i:j]...)
		if b[j] == '"' {
			return dst, j, nil
		}
		j++
		if j >= len(b) {
			return dst, len(b), syntaxError(len(b), "unterminated string")
		}
		var c byte
		switch b[j] {
		case '"', '\\', '/':
			c = b[j]
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		case 'u':
			r, ok := hex4(b, j+1)
			if !ok {
				return dst, j, syntaxError(j-1, "invalid \\u escape")
			}
			i = j + 5
			if utf16.IsSurrogate(r) {
				if i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
					if r2, ok := hex4(b, i+2); ok {
						if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
							dst = utf8.AppendRune(dst, d)
							i += 6
							continue
						}
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default:
			return dst, j, syntaxError(j-1, "invalid escape "+strconv.Quote(string(b[j-1:j+1])))
		}
		dst = append(dst, c)
		i = j + 1
	}
}

// skipNumber validates the number at i and returns the index past it.
func (p *parser) skipNumber(i int) (int, error) {
	b := p.b
	n := len(b)
	if i < n && b[i] == '-' {
		i++
	}
	switch {
	case i < n && b[i] == '0':
		i++
	case i < n && b[i] >= '1' && b[i] <= '9':
		i++
		for i < n && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return i, p.unexpected(i, "digit")
	}
	if i < n && b[i] == '.' {
		i++
		if i >= n || b[i] < '0' || b[i] > '9' {
			return i, p.unexpected(i, "digit")
		}
		for i < n && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < n && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < n && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= n || b[i] < '0' || b[i] > '9' {
			return i, p.unexpected(i, "digit")
		}
		for i < n && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	return i, nil
}

func (p *parser) literal(i int, lit string) (int, error) {
	b := p.b
	for k := 0; k < len(lit); k++ {
		if i+k >= len(b) || b[i+k] != lit[k] {
			return i + k, p.unexpected(i+k, "literal "+lit)
		}
	}
	return i + len(lit), nil
}

// skipValue validates the value at i and returns the index past it.
func (p *parser) skipValue(i int) (int, error) {
	b := p.b
	if i >= len(b) {
		return i, p.unexpected(i, "value")
	}
	switch c := b[i]; c {
	case '"':
		end, _, err := p.scanString(i + 1)
		return end + 1, err
	case '{':
		return p.skipObject(i)
	case '[':
		return p.skipArray(i)
	case 't':
		return p.literal(i, "true")
	case 'f':
		return p.literal(i, "false")
	case 'n':
		return p.literal(i, "null")
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return p.skipNumber(i)
		}
		return i, p.unexpected(i, "value")
	}
}

func (p *parser) skipObject(i int) (int, error) {
	if err := p.enter(i); err != nil {
		return i, err
	}
	b := p.b
	i = p.ws(i + 1)
	if i < len(b) && b[i] == '}' {
		p.depth--
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return i, p.unexpected(i, "string key")
		}
		end, _, err := p.scanString(i + 1)
		if err != nil {
			return end, err
		}
		i = p.ws(end + 1)
		if i >= len(b) || b[i] != ':' {
			return i, p.unexpected(i, "':'")
		}
		if i, err = p.skipValue(p.ws(i + 1)); err != nil {
			return i, err
		}
		var done bool
		if i, done, err = p.after(i, '}'); err != nil || done {
			p.depth--
			return i, err
		}
	}
}

func (p *parser) skipArray(i int) (int, error) {
	if err := p.enter(i); err != nil {
		return i, err
	}
	b := p.b
	i = p.ws(i + 1)
	if i < len(b) && b[i] == ']' {
		p.depth--
		return i + 1, nil
	}
	for {
		var err error
		if i, err = p.skipValue(i); err != nil {
			return i, err
		}
		var done bool
		if i, done, err = p.after(i, ']'); err != nil || done {
			p.depth--
			return i, err
		}
	}
}

// parseTop parses the top-level object.
func (p *parser) parseTop() error {
	b, r := p.b, p.r
	i := p.ws(0)
	if i >= len(b) || b[i] != '{' {
		if i < len(b) && isValueStart(b[i]) {
			return syntaxError(i, "request body must be a JSON object")
		}
		return p.unexpected(i, "'{'")
	}
	p.depth = 1
	i = p.ws(i + 1)
	if i < len(b) && b[i] == '}' {
		r.End = i
		i++
	} else {
		for {
			raw, key, vi, err := p.key(i)
			if err != nil {
				return err
			}
			var ve int
			switch p.ep {
			case EndpointChatCompletions:
				ve, err = p.chatField(key, vi)
			case EndpointGenerate:
				ve, err = p.generateField(key, vi)
			default:
				ve, err = p.completionsField(key, vi)
			}
			if err != nil {
				return err
			}
			r.Fields = append(r.Fields, Field{Key: raw, ValueStart: vi, ValueEnd: ve})
			var done bool
			if i, done, err = p.after(ve, '}'); err != nil {
				return err
			}
			if done {
				r.End = i - 1
				break
			}
		}
	}
	if i = p.ws(i); i != len(b) {
		return syntaxError(i, "unexpected data after the top-level object")
	}
	switch p.ep {
	case EndpointGenerate:
		if p.textSet {
			r.HasText = true
			r.Text = p.text
			r.PDText = p.text
			r.BatchSize = p.textBatch
		} else if p.idsSet {
			r.Text = r.ids
			r.BatchSize = p.idsBatch
		}
		r.HasInputIDs = p.idsSet
	case EndpointCompletions:
		if p.textSet {
			r.Text = p.text
			r.BatchSize = p.textBatch
			r.PDText = p.text
			if p.textFirst >= 0 {
				r.PDText = r.buf[:p.textFirst]
			}
		}
	case EndpointChatCompletions:
		r.Text = r.buf
		r.PDText = r.Text
	}
	return nil
}

// commonField handles "model" and "stream". ok is false for other keys.
func (p *parser) commonField(key []byte, vi int) (ve int, ok bool, err error) {
	switch string(key) {
	case "model":
		ve, err = p.parseModel(vi)
		return ve, true, err
	case "stream":
		p.r.Stream, ve, err = p.parseBool(vi, `"stream" must be a boolean`)
		return ve, true, err
	}
	return 0, false, nil
}

func (p *parser) parseModel(i int) (int, error) {
	b, r := p.b, p.r
	if p.isNull(i) {
		r.Model = nil
		return i + 4, nil
	}
	if i >= len(b) || b[i] != '"' {
		return i, p.wrongType(i, `"model" must be a string`)
	}
	end, esc, err := p.scanString(i + 1)
	if err != nil {
		return end, err
	}
	if esc {
		r.modelBuf, _, _ = p.appendString(r.modelBuf[:0], i+1)
		r.Model = r.modelBuf
	} else {
		r.Model = b[i+1 : end]
	}
	return end + 1, nil
}

func (p *parser) parseBool(i int, msg string) (bool, int, error) {
	b := p.b
	if i < len(b) {
		switch b[i] {
		case 't':
			end, err := p.literal(i, "true")
			return err == nil, end, err
		case 'f':
			end, err := p.literal(i, "false")
			return false, end, err
		case 'n':
			end, err := p.literal(i, "null")
			return false, end, err
		}
	}
	return false, i, p.wrongType(i, msg)
}

func (p *parser) generateField(key []byte, vi int) (int, error) {
	if ve, ok, err := p.commonField(key, vi); ok {
		return ve, err
	}
	switch string(key) {
	case "text":
		return p.parseTextOrPrompt(vi, false)
	case "input_ids":
		return p.parseInputIDs(vi)
	case "return_logprob":
		var ve int
		var err error
		p.r.Logprobs, ve, err = p.parseBool(vi, `"return_logprob" must be a boolean`)
		return ve, err
	}
	return p.skipValue(vi)
}

func (p *parser) completionsField(key []byte, vi int) (int, error) {
	if ve, ok, err := p.commonField(key, vi); ok {
		return ve, err
	}
	switch string(key) {
	case "prompt":
		return p.parseTextOrPrompt(vi, true)
	case "logprobs":
		ve, err := p.skipValue(vi)
		p.r.Logprobs = err == nil && !(ve-vi == 4 && p.b[vi] == 'n')
		return ve, err
	}
	return p.skipValue(vi)
}

func (p *parser) chatField(key []byte, vi int) (int, error) {
	if ve, ok, err := p.commonField(key, vi); ok {
		return ve, err
	}
	switch string(key) {
	case "messages":
		return p.parseMessages(vi)
	case "logprobs":
		var ve int
		var err error
		p.r.Logprobs, ve, err = p.parseBool(vi, `"logprobs" must be a boolean`)
		return ve, err
	case "n":
		return p.parseN(vi)
	}
	return p.skipValue(vi)
}

func (p *parser) parseN(i int) (int, error) {
	b := p.b
	p.r.BatchSize = 0
	if p.isNull(i) {
		return i + 4, nil
	}
	if i >= len(b) || !(b[i] == '-' || (b[i] >= '0' && b[i] <= '9')) {
		return i, p.wrongType(i, `"n" must be an integer`)
	}
	end, err := p.skipNumber(i)
	if err != nil {
		return end, err
	}
	j := i
	neg := b[j] == '-'
	if neg {
		j++
	}
	if end-j > 19 {
		return i, typeError(i, `"n" is out of range`)
	}
	var v uint64
	for ; j < end; j++ {
		c := b[j]
		if c < '0' || c > '9' {
			return i, typeError(i, `"n" must be an integer`)
		}
		v = v*10 + uint64(c-'0')
	}
	if (!neg && v > 1<<63-1) || (neg && v > 1<<63) {
		return i, typeError(i, `"n" is out of range`)
	}
	if !neg && v > 1 {
		p.r.BatchSize = int(v)
	}
	return end, nil
}

const (
	kindNone = iota
	kindString
	kindNumber
	kindArray
)

// parseTextOrPrompt parses /generate "text" (prompt=false: string or array of
// strings) or completions "prompt" (prompt=true: additionally token ids).
func (p *parser) parseTextOrPrompt(i int, prompt bool) (int, error) {
	b, r := p.b, p.r
	name := `"text" must be a string or an array of strings`
	if prompt {
		name = `"prompt" must be a string, an array of strings or an array of token ids`
	}
	p.textSet, p.text, p.textBatch = false, nil, 0
	p.textFirst = -1
	if p.isNull(i) {
		return i + 4, nil
	}
	if i < len(b) && b[i] == '"' {
		end, esc, err := p.scanString(i + 1)
		if err != nil {
			return end, err
		}
		p.textSet = true
		if esc {
			r.buf, _, _ = p.appendString(r.buf[:0], i+1)
			p.text = r.buf
		} else {
			p.text = b[i+1 : end]
		}
		return end + 1, nil
	}
	if i >= len(b) || b[i] != '[' {
		return i, p.wrongType(i, name)
	}
	allow := uint8(1 << kindString)
	if prompt {
		allow |= 1<<kindNumber | 1<<kindArray
	}
	var n, kind int
	var err error
	r.buf, i, n, kind, err = p.parseList(r.buf[:0], i, allow, name)
	if err != nil {
		return i, err
	}
	p.textSet = true
	p.text = r.buf
	p.textFirst = len(r.buf)
	if kind == kindString || kind == kindArray {
		p.textBatch = n
		p.textFirst = p.firstLen
	}
	return i, nil
}

func (p *parser) parseInputIDs(i int) (int, error) {
	b, r := p.b, p.r
	const name = `"input_ids" must be an array of token ids or an array of arrays of token ids`
	p.idsSet, p.idsBatch = false, 0
	if p.isNull(i) {
		return i + 4, nil
	}
	if i >= len(b) || b[i] != '[' {
		return i, p.wrongType(i, name)
	}
	var n, kind int
	var err error
	r.ids, i, n, kind, err = p.parseList(r.ids[:0], i, 1<<kindNumber|1<<kindArray, name)
	if err != nil {
		return i, err
	}
	p.idsSet = true
	if kind == kindArray {
		p.idsBatch = n
	}
	return i, nil
}

func elemKind(c byte) int {
	switch {
	case c == '"':
		return kindString
	case c == '[':
		return kindArray
	case c == '-' || (c >= '0' && c <= '9'):
		return kindNumber
	}
	return kindNone
}

// parseList parses the array at i (b[i] == '['), whose elements must all be of
// the same kind, one allowed by the bit set allow: strings (appended joined by
// ' '), numbers (raw, joined by ' ') or arrays of numbers (flattened). It
// returns the number of elements and their kind.
func (p *parser) parseList(dst []byte, i int, allow uint8, msg string) (out []byte, end, n, kind int, err error) {
	b := p.b
	if err = p.enter(i); err != nil {
		return dst, i, 0, 0, err
	}
	i = p.ws(i + 1)
	if i < len(b) && b[i] == ']' {
		p.depth--
		p.firstLen = len(dst)
		return dst, i + 1, 0, kindNone, nil
	}
	first := 0
	for {
		k := kindNone
		if i < len(b) {
			k = elemKind(b[i])
		}
		if k == kindNone || allow&(1<<k) == 0 || (kind != kindNone && k != kind) {
			return dst, i, n, kind, p.wrongType(i, msg)
		}
		kind = k
		switch k {
		case kindString:
			if n > 0 {
				dst = append(dst, ' ')
			}
			dst, i, err = p.appendString(dst, i+1)
			i++
		case kindNumber:
			s := i
			i, err = p.skipNumber(i)
			if err == nil {
				if len(dst) > 0 {
					dst = append(dst, ' ')
				}
				dst = append(dst, b[s:i]...)
			}
		case kindArray:
			dst, i, _, _, err = p.parseList(dst, i, 1<<kindNumber, msg)
		}
		if err != nil {
			return dst, i, n, kind, err
		}
		if n == 0 {
			first = len(dst)
		}
		n++
		var done bool
		if i, done, err = p.after(i, ']'); err != nil || done {
			p.depth--
			p.firstLen = first
			return dst, i, n, kind, err
		}
	}
}

// appendPiece appends the string starting at s (after its opening quote) to
// r.buf, preceded by ' ' if r.buf is not empty; an empty string appends
// nothing. It returns the index of the closing quote.
func (p *parser) appendPiece(s int) (int, error) {
	r := p.r
	n0 := len(r.buf)
	if n0 > 0 {
		r.buf = append(r.buf, ' ')
	}
	n1 := len(r.buf)
	var end int
	var err error
	r.buf, end, err = p.appendString(r.buf, s)
	if len(r.buf) == n1 {
		r.buf = r.buf[:n0]
	}
	return end, err
}

func (p *parser) parseMessages(i int) (int, error) {
	b, r := p.b, p.r
	r.buf = r.buf[:0]
	if p.isNull(i) {
		return i + 4, nil
	}
	if i >= len(b) || b[i] != '[' {
		return i, p.wrongType(i, `"messages" must be an array`)
	}
	return p.objectArray(i, "each message must be an object", p.parseMessage)
}

// stringIs reads the value at vi of a field that must be a string or null
// and reports whether it equals want (after unescaping). It returns the
// offset just past the value; field names the field in a type error.
func (p *parser) stringIs(vi int, field, want string) (ve int, is bool, err error) {
	b := p.b
	if p.isNull(vi) {
		return vi + 4, false, nil
	}
	if vi >= len(b) || b[vi] != '"' {
		return vi, false, p.wrongType(vi, field+" must be a string")
	}
	end, esc, err := p.scanString(vi + 1)
	if err != nil {
		return end, false, err
	}
	return end + 1, p.equalString(vi+1, end, esc, want), nil
}

func (p *parser) parseMessage(i int) (int, error) {
	b, r := p.b, p.r
	if err := p.enter(i); err != nil {
		return i, err
	}
	mark := len(r.buf)
	assistant := false
	reasoning := -1 // start of reasoning_content string content
	i = p.ws(i + 1)
	if i < len(b) && b[i] == '}' {
		p.depth--
		return i + 1, nil
	}
	for {
		_, key, vi, err := p.key(i)
		if err != nil {
			return vi, err
		}
		var ve int
		switch string(key) {
		case "role":
			if ve, assistant, err = p.stringIs(vi, `message "role"`, "assistant"); err != nil {
				return ve, err
			}
		case "content":
			r.buf = r.buf[:mark]
			ve, err = p.parseContent(vi)
		case "reasoning_content":
			reasoning = -1
			if p.isNull(vi) {
				ve = vi + 4
				break
			}
			if vi >= len(b) || b[vi] != '"' {
				return vi, p.wrongType(vi, `message "reasoning_content" must be a string`)
			}
			end, _, err := p.scanString(vi + 1)
			if err != nil {
				return end, err
			}
			reasoning = vi + 1
			ve = end + 1
		default:
			ve, err = p.skipValue(vi)
		}
		if err != nil {
			return ve, err
		}
		var done bool
		if i, done, err = p.after(ve, '}'); err != nil {
			return i, err
		}
		if done {
			break
		}
	}
	p.depth--
	if assistant && reasoning >= 0 {
		p.appendPiece(reasoning) // already validated
	}
	return i, nil
}

func (p *parser) parseContent(i int) (int, error) {
	b := p.b
	if p.isNull(i) {
		return i + 4, nil
	}
	if i < len(b) && b[i] == '"' {
		end, err := p.appendPiece(i + 1)
		return end + 1, err
	}
	if i >= len(b) || b[i] != '[' {
		return i, p.wrongType(i, `message "content" must be a string or an array of content parts`)
	}
	return p.objectArray(i, "each content part must be an object", p.parsePart)
}

// objectArray parses the array of objects that starts at b[i] == '[',
// calling elem at the start of each object; elemErr names a non-object
// element.
func (p *parser) objectArray(i int, elemErr string, elem func(int) (int, error)) (int, error) {
	b := p.b
	if err := p.enter(i); err != nil {
		return i, err
	}
	i = p.ws(i + 1)
	if i < len(b) && b[i] == ']' {
		p.depth--
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '{' {
			return i, p.wrongType(i, elemErr)
		}
		var err error
		if i, err = elem(i); err != nil {
			return i, err
		}
		var done bool
		if i, done, err = p.after(i, ']'); err != nil || done {
			p.depth--
			return i, err
		}
	}
}

func (p *parser) parsePart(i int) (int, error) {
	b, r := p.b, p.r
	if err := p.enter(i); err != nil {
		return i, err
	}
	mark := len(r.buf)
	isText := false
	badText := -1 // offset of a non-string "text" value
	i = p.ws(i + 1)
	if i < len(b) && b[i] == '}' {
		p.depth--
		return i + 1, nil
	}
	for {
		_, key, vi, err := p.key(i)
		if err != nil {
			return vi, err
		}
		var ve int
		switch string(key) {
		case "type":
			if ve, isText, err = p.stringIs(vi, `content part "type"`, "text"); err != nil {
				return ve, err
			}
		case "text":
			r.buf = r.buf[:mark]
			badText = -1
			if vi < len(b) && b[vi] == '"' {
				var end int
				end, err = p.appendPiece(vi + 1)
				ve = end + 1
			} else {
				ve, err = p.skipValue(vi)
				if err == nil && !(ve-vi == 4 && b[vi] == 'n') {
					badText = vi
				}
			}
		default:
			ve, err = p.skipValue(vi)
		}
		if err != nil {
			return ve, err
		}
		var done bool
		if i, done, err = p.after(ve, '}'); err != nil {
			return i, err
		}
		if done {
			break
		}
	}
	p.depth--
	if !isText {
		r.buf = r.buf[:mark]
	} else if badText >= 0 {
		return badText, typeError(badText, `content part "text" must be a string`)
	}
	return i, nil
}

// WriteError writes an OpenAI-style error response
// {"error":{"message":msg,"type":typ,"param":null,"code":code}} with
// Content-Type application/json and the given status. An empty code is
// written as null. Typical uses: 400 "invalid_request_error"/"invalid_json",
// 413 "invalid_request_error"/"request_too_large".
func WriteError(w http.ResponseWriter, status int, typ, code, msg string) {
	var body struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	body.Error.Message = msg
	body.Error.Type = typ
	if code != "" {
		body.Error.Code = &code
	}
	out, _ := json.Marshal(&body)
	out = append(out, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(status)
	_, _ = w.Write(out)
}
