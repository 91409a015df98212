package tree

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// A "char" in this package is exactly what utf8.DecodeRune yields: a valid
// UTF-8 sequence, or a single byte of an invalid/truncated sequence. This is
// the segmentation used by utf8.RuneCount and by `for range string`, so every
// invalid byte counts as one char, consistently, everywhere.
//
// Two properties make byte-level comparison safe:
//   - a non-continuation byte (not 0b10xxxxxx) always starts a char;
//   - a continuation byte at p is inside a char only if the nearest
//     non-continuation byte in p-3..p-1 decodes to a valid sequence covering p.
// So char boundaries can be decided locally (isBoundary), and the segmentation
// of a prefix that ends on a boundary does not depend on what follows it.

const hi8 = 0x8080808080808080

// countChars returns the number of chars in p (== utf8.RuneCount(p)), with an
// 8-bytes-at-a-time fast path for ASCII runs.
func countChars(p []byte) int {
	n := 0
	i := 0
	for i < len(p) {
		if len(p)-i >= 8 {
			if binary.LittleEndian.Uint64(p[i:])&hi8 == 0 {
				n += 8
				i += 8
				continue
			}
		}
		c := p[i]
		if c < utf8.RuneSelf {
			n++
			i++
			continue
		}
		_, size := utf8.DecodeRune(p[i:])
		n++
		i += size
	}
	return n
}

// isCont reports whether b is a UTF-8 continuation byte.
func isCont(b byte) bool { return b&0xC0 == 0x80 }

// isBoundary reports whether byte offset p of s is a char boundary.
func isBoundary(s []byte, p int) bool {
	if p <= 0 || p >= len(s) || !isCont(s[p]) {
		return true
	}
	for j := p - 1; j >= 0 && j >= p-3; j-- {
		if !isCont(s[j]) {
			_, size := utf8.DecodeRune(s[j:])
			return j+size <= p
		}
	}
	return true // stray continuation byte: an invalid char of its own
}

// lcpBytes returns the length of the common byte prefix of a and b.
func lcpBytes(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for ; i+8 <= n; i += 8 {
		x := binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:])
		if x != 0 {
			return i + bits.TrailingZeros64(x)>>3
		}
	}
	for ; i < n; i++ {
		if a[i] != b[i] {
			break
		}
	}
	return i
}

// matchLen returns the byte length of the longest common prefix of a and b
// that ends on a char boundary of both (i.e. the common prefix in chars).
func matchLen(a, b []byte) int {
	var k int
	if len(a) >= len(b) && bytes.Equal(a[:len(b)], b) {
		k = len(b)
	} else {
		k = lcpBytes(a, b)
	}
	for k > 0 && !(isBoundary(a, k) && isBoundary(b, k)) {
		k--
	}
	return k
}

// invalidKeyBase offsets keys for invalid bytes past the Unicode range so they
// never collide with a decoded rune (including a genuine U+FFFD).
const invalidKeyBase = utf8.MaxRune + 1

// firstKey returns the child key of s (its first char) and that char's size.
// s must be non-empty.
func firstKey(s []byte) uint32 {
	c := s[0]
	if c < utf8.RuneSelf {
		return uint32(c)
	}
	r, size := utf8.DecodeRune(s)
	if r == utf8.RuneError && size == 1 {
		return invalidKeyBase + uint32(c)
	}
	return uint32(r)
}
