package sim

import (
	"math/rand"
	"reflect"
	"testing"
)

func TestTokenize(t *testing.T) {
	cases := []struct {
		in  string
		cpt int
		out []string
	}{
		{"", 4, []string{}},
		{"abcdefghij", 4, []string{"abcd", "efgh", "ij"}},
		{"abcdefgh", 4, []string{"abcd", "efgh"}},
		{"ab中cdef", 4, []string{"ab", "中", "cdef"}},
		{"中文字", 4, []string{"中", "文", "字"}},
		{"hi😀😀!", 4, []string{"hi", "😀", "😀", "!"}},
		{"héllo", 2, []string{"h", "é", "ll", "o"}},
		{"abc", 1, []string{"a", "b", "c"}},
		{"abcdef", 0, []string{"abcd", "ef"}}, // default 4
	}
	for _, c := range cases {
		got := Tokenize(c.in, c.cpt)
		if !reflect.DeepEqual(got, c.out) {
			t.Errorf("Tokenize(%q,%d) = %q, want %q", c.in, c.cpt, got, c.out)
		}
		if n := CountTokens(c.in, c.cpt); n != len(c.out) {
			t.Errorf("CountTokens(%q,%d) = %d, want %d", c.in, c.cpt, n, len(c.out))
		}
	}
}

func keysOf(prefix uint64, n int) []uint64 {
	k := make([]uint64, n)
	for i := range k {
		k[i] = prefix*1000 + uint64(i)
	}
	return k
}

func TestCacheMatchInsert(t *testing.T) {
	c := newPrefixCache(100)
	a := keysOf(1, 10)
	if got := c.matchInsert(a); got != 0 {
		t.Fatalf("first insert matched %d", got)
	}
	if got := c.matchInsert(a); got != 10 {
		t.Fatalf("same prompt matched %d, want 10", got)
	}
	// shared prefix of 6 then divergence
	b := append(append([]uint64{}, a[:6]...), keysOf(2, 5)...)
	if got := c.peek(b); got != 6 {
		t.Fatalf("peek shared prefix = %d, want 6", got)
	}
	if got := c.matchInsert(b); got != 6 {
		t.Fatalf("shared prefix matched %d, want 6", got)
	}
	if c.len() != 15 {
		t.Fatalf("size = %d, want 15", c.len())
	}
	// a prefix of a cached sequence is fully matched
	if got := c.matchInsert(a[:3]); got != 3 {
		t.Fatalf("prefix matched %d, want 3", got)
	}
	c.flush()
	if c.len() != 0 || c.peek(a) != 0 {
		t.Fatalf("flush left size %d", c.len())
	}
}

func TestCacheLRUEviction(t *testing.T) {
	c := newPrefixCache(10)
	a, b, d := keysOf(1, 5), keysOf(2, 5), keysOf(3, 5)
	c.matchInsert(a)
	c.matchInsert(b)
	c.matchInsert(a) // a is now more recent than b
	c.matchInsert(d) // over capacity: b (least recent) goes
	if c.len() != 10 {
		t.Fatalf("size = %d, want 10", c.len())
	}
	if got := c.peek(b); got != 0 {
		t.Fatalf("b still cached: %d", got)
	}
	if c.peek(a) != 5 || c.peek(d) != 5 {
		t.Fatalf("a=%d d=%d, want 5 5", c.peek(a), c.peek(d))
	}
	// Eviction removes whole radix nodes, as SGLang does: making room for
	// 3 tokens drops all of a (an unbranched chain), not just its tail.
	e := keysOf(4, 3)
	c.matchInsert(e)
	if got := c.peek(a); got != 0 {
		t.Fatalf("a after eviction = %d, want 0 (whole node evicted)", got)
	}
	if c.len() != 8 || c.peek(d) != 5 || c.peek(e) != 3 {
		t.Fatalf("size %d d=%d e=%d, want 8 5 3", c.len(), c.peek(d), c.peek(e))
	}
	// A shared prefix is a node of its own: evicting one branch keeps it.
	c3 := newPrefixCache(12)
	x := append(keysOf(6, 4), keysOf(7, 3)...)
	y := append(keysOf(6, 4), keysOf(8, 3)...)
	c3.matchInsert(x) // 7 tokens
	c3.matchInsert(y) // +3 = 10
	z := keysOf(9, 4) // +4 = 14 > 12: x's branch (3) is least recent
	c3.matchInsert(z)
	if c3.peek(x) != 4 || c3.peek(y) != 7 || c3.len() != 11 {
		t.Fatalf("x=%d y=%d size=%d, want 4 7 11", c3.peek(x), c3.peek(y), c3.len())
	}
}

func TestCacheRandomInvariants(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	c := newPrefixCache(500)
	for i := 0; i < 5000; i++ {
		// prompts share one of 8 prefixes
		n := 20 + rng.Intn(80)
		k := make([]uint64, n)
		p := uint64(rng.Intn(8))
		for j := range k {
			if j < 30 {
				k[j] = p*100000 + uint64(j)
			} else {
				k[j] = uint64(rng.Intn(1 << 20))
			}
		}
		want := c.peek(k)
		if got := c.matchInsert(k); got != want {
			t.Fatalf("matchInsert %d != peek %d", got, want)
		}
		if c.len() > 500 {
			t.Fatalf("size %d over capacity", c.len())
		}
		if got := c.peek(k); got != min(n, 500) {
			t.Fatalf("just inserted prompt matches %d of %d", got, n)
		}
	}
}

func TestNoCache(t *testing.T) {
	var c *prefixCache
	if c.matchInsert([]uint64{1}) != 0 || c.peek([]uint64{1}) != 0 || c.len() != 0 {
		t.Fatal("nil cache should match nothing")
	}
	c.flush()
}

func BenchmarkCache16x8(b *testing.B) {
	// 16 system prompts x 8 questions, ~1.5k chars each, 4 chars/token.
	sys := make([]string, 16)
	for i := range sys {
		sys[i] = string(rune('A'+i)) + " system prompt " + randText(rand.New(rand.NewSource(int64(i))), 1000)
	}
	var prompts []tokenSeq
	for i := range sys {
		for j := 0; j < 8; j++ {
			prompts = append(prompts, seqFromText(sys[i]+randText(rand.New(rand.NewSource(int64(100+i*8+j))), 500), 4))
		}
	}
	c := newPrefixCache(50000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.matchInsert(prompts[i%len(prompts)].keys)
	}
}

func randText(rng *rand.Rand, n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz     "
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[rng.Intn(len(letters))]
	}
	return string(b)
}
