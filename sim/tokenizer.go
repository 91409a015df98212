package sim

import (
	"hash/fnv"
	"strconv"
	"unicode/utf8"
)

// Tokenize splits text with the pseudo-tokenizer: runs of ASCII characters
// are cut into pieces of charsPerToken bytes (the last piece of a run may be
// shorter); every non-ASCII rune (CJK, emoji, accented letters...) is a token
// of its own. An ASCII run is interrupted by a non-ASCII rune. Invalid UTF-8
// bytes count as one token each. charsPerToken <= 0 means 4.
func Tokenize(text string, charsPerToken int) []string {
	if charsPerToken <= 0 {
		charsPerToken = 4
	}
	out := make([]string, 0, len(text)/charsPerToken+1)
	i := 0
	for i < len(text) {
		if text[i] < utf8.RuneSelf {
			j := i
			for j < len(text) && j-i < charsPerToken && text[j] < utf8.RuneSelf {
				j++
			}
			out = append(out, text[i:j])
			i = j
			continue
		}
		_, size := utf8.DecodeRuneInString(text[i:])
		out = append(out, text[i:i+size])
		i += size
	}
	return out
}

// CountTokens returns len(Tokenize(text, charsPerToken)) without allocating.
func CountTokens(text string, charsPerToken int) int {
	if charsPerToken <= 0 {
		charsPerToken = 4
	}
	n, run := 0, 0
	for i := 0; i < len(text); {
		if text[i] < utf8.RuneSelf {
			if run == 0 {
				n++
			}
			run++
			if run == charsPerToken {
				run = 0
			}
			i++
			continue
		}
		run = 0
		_, size := utf8.DecodeRuneInString(text[i:])
		n++
		i += size
	}
	return n
}

// tokenSeq is a tokenized prompt: keys identify tokens in the prefix cache,
// ids are the pseudo vocabulary ids reported in logprobs.
type tokenSeq struct {
	keys []uint64
	ids  []int
	text []string // nil for input_ids prompts
}

const vocabSize = 151936

func tokenKey(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64() &^ (1 << 63)
}

func seqFromText(text string, cpt int) tokenSeq {
	toks := Tokenize(text, cpt)
	s := tokenSeq{keys: make([]uint64, len(toks)), ids: make([]int, len(toks)), text: toks}
	for i, t := range toks {
		k := tokenKey(t)
		s.keys[i] = k
		s.ids[i] = int(k % vocabSize)
	}
	return s
}

func seqFromIDs(ids []int) tokenSeq {
	s := tokenSeq{keys: make([]uint64, len(ids)), ids: append([]int(nil), ids...)}
	for i, id := range ids {
		// Tag ids so that they never collide with text-token hashes.
		s.keys[i] = uint64(int64(id)) | 1<<63
	}
	return s
}

func (s tokenSeq) tokenText(i int) string {
	if s.text != nil {
		return s.text[i]
	}
	return "<" + strconv.Itoa(s.ids[i]) + ">"
}
