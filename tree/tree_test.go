package tree

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func ins(tr *Tree, s, tenant string) { tr.Insert([]byte(s), tr.Tenant(tenant)) }

func match(tr *Tree, s string, f Filter) (string, int, int) {
	m := tr.Match([]byte(s), f)
	return tr.TenantName(m.Tenant), m.MatchedChars, m.InputChars
}

func expect(t *testing.T, tr *Tree, s string, f Filter, wantTenant string, wantMatched int) {
	t.Helper()
	name, matched, input := match(tr, s, f)
	if name != wantTenant || matched != wantMatched || input != utf8.RuneCountInString(s) {
		t.Fatalf("Match(%q) = (%q, %d, %d), want (%q, %d, %d)", s, name, matched, input, wantTenant, wantMatched, utf8.RuneCountInString(s))
	}
}

func TestBasicInsertMatch(t *testing.T) {
	tr := New(Options{})
	expect(t, tr, "hello", nil, "", 0)
	ins(tr, "hello world", "a")
	expect(t, tr, "hello world", nil, "a", 11)
	expect(t, tr, "hello world and more", nil, "a", 11)
	expect(t, tr, "hello", nil, "a", 5)
	expect(t, tr, "help", nil, "a", 3)
	expect(t, tr, "xyz", nil, "", 0)
	expect(t, tr, "", nil, "", 0)
	checkInvariants(t, tr)
	s := tr.Stats()
	if s.Nodes != 1 || s.Chars != 11 || s.Tenants != 1 || s.CharsPerTenant["a"] != 11 {
		t.Fatalf("stats %+v", s)
	}
	if tr.TenantChars(tr.Tenant("a")) != 11 || tr.TenantChars(42) != 0 {
		t.Fatal("TenantChars")
	}
}

func TestSharedPrefixAndSplits(t *testing.T) {
	tr := New(Options{})
	ins(tr, "system: you are helpful. user: hi", "a")
	ins(tr, "system: you are helpful. user: bye", "b")
	ins(tr, "system: you are", "c")
	checkInvariants(t, tr)
	expect(t, tr, "system: you are helpful. user: hi there", nil, "a", 33)
	expect(t, tr, "system: you are helpful. user: bye", nil, "b", 34)
	// Shared node: most recent inserter among the node's tenants wins.
	expect(t, tr, "system: you are helpful. user: x", nil, "b", 31)
	expect(t, tr, "system: you", nil, "c", 11)
	ins(tr, "system: you are helpful. user: hi", "a") // touch the whole path
	expect(t, tr, "system: you are helpful. user: x", nil, "a", 31)
	expect(t, tr, "system: you", nil, "a", 11)
	s := tr.Stats()
	// distinct chars: "system: you are" (15) + " helpful. user: " (16) + "hi" + "bye"
	if s.Chars != 15+16+2+3 {
		t.Fatalf("chars %d", s.Chars)
	}
	if s.CharsPerTenant["a"] != 33 || s.CharsPerTenant["b"] != 34 || s.CharsPerTenant["c"] != 15 {
		t.Fatalf("per tenant %v", s.CharsPerTenant)
	}
	if s.Nodes != 4 {
		t.Fatalf("nodes %d", s.Nodes)
	}
}

func TestUTF8(t *testing.T) {
	tr := New(Options{})
	// 中 = E4 B8 AD, 丫 = E4 B8 AB, 乐 = E4 B9 90 : same first byte(s).
	ins(tr, "中文", "a")
	ins(tr, "丫头", "b")
	ins(tr, "乐乐", "c")
	checkInvariants(t, tr)
	expect(t, tr, "中国", nil, "a", 1)
	expect(t, tr, "丫", nil, "b", 1)
	expect(t, tr, "乐乐乐", nil, "c", 2)
	expect(t, tr, "乙", nil, "", 0)
	// Split inside a shared multi-byte prefix: 中文 vs 中断 share bytes E4 B8 AD E6 96.
	ins(tr, "中断", "d") // 断 = E6 96 AD, 文 = E6 96 87
	checkInvariants(t, tr)
	expect(t, tr, "中文字", nil, "a", 2)
	expect(t, tr, "中断了", nil, "d", 2)
	expect(t, tr, "中", nil, "d", 1)
	// Emoji and mixed.
	ins(tr, "hi 👋🏽 there", "e")
	ins(tr, "hi 👋 you", "f")
	checkInvariants(t, tr)
	expect(t, tr, "hi 👋🏽 there!", nil, "e", 11)
	expect(t, tr, "hi 👋🏿", nil, "f", 4) // skin tone differs in last byte
	s := tr.Stats()
	if s.CharsPerTenant["e"] != 11 || s.CharsPerTenant["a"] != 2 {
		t.Fatalf("counts are not in chars: %v", s.CharsPerTenant)
	}
}

func TestInvalidUTF8(t *testing.T) {
	tr := New(Options{})
	inputs := []string{
		"abc\xe4", "abc\xe4\xb8\xad", "abc\xe4\xb8", "\x80\x81\x82", "\x80\x81\x83",
		"\xff", "\xef\xbf\xbd", "a\xe4\xb8\xadb", "a\xe4\xb8\xad\x80", "a\xe4\xb8\xad\x80\x80",
		"\xf0\x9f\x91", "\xf0\x9f\x91\x8b",
	}
	for i, s := range inputs {
		ins(tr, s, fmt.Sprint("t", i))
		checkInvariants(t, tr)
	}
	for i, s := range inputs {
		expect(t, tr, s, onlyFilter(tr.Tenant(fmt.Sprint("t", i))), fmt.Sprint("t", i), utf8.RuneCountInString(s))
	}
	// \xe4 alone must not match the valid 中.
	expect(t, tr, "abc\xe4", onlyFilter(tr.Tenant("t1")), "t1", 3)
	expect(t, tr, "\xef\xbf\xbd", onlyFilter(tr.Tenant("t5")), "", 0)
}

func TestFilter(t *testing.T) {
	tr := New(Options{})
	ins(tr, "aaaa bbbb cccc", "deep")
	ins(tr, "aaaa bbbb", "mid")
	ins(tr, "aaaa", "shallow")
	a, d, m, s := tr.Tenant("unused"), tr.Tenant("deep"), tr.Tenant("mid"), tr.Tenant("shallow")
	expect(t, tr, "aaaa bbbb cccc", nil, "deep", 14)
	expect(t, tr, "aaaa bbbb cccc", allowSet{m: true, s: true}, "mid", 9)
	expect(t, tr, "aaaa bbbb cc", allowSet{m: true, s: true}, "mid", 9)
	expect(t, tr, "aaaa bbbb cc", allowSet{d: true}, "deep", 12)
	expect(t, tr, "aaaa bbbb cccc", allowSet{s: true}, "shallow", 4)
	expect(t, tr, "aaaa bbbb cccc", allowSet{a: true}, "", 0)
	// At "aaaa" every tenant is present; the most recent (shallow) wins.
	expect(t, tr, "aaaazzz", nil, "shallow", 4)
	// Partial match inside " bbbb" (tenants mid, deep): most recent is mid.
	expect(t, tr, "aaaa zzz", nil, "mid", 5)
	ins(tr, "aaaa bbbb cccc", "deep")
	expect(t, tr, "aaaazzz", nil, "deep", 4)
	expect(t, tr, "aaaa bbbb zzz", allowSet{m: true, s: true}, "mid", 9)
}

func TestEvictPerTenant(t *testing.T) {
	tr := New(Options{MaxCharsPerTenant: 10})
	ins(tr, "0123456789", "a") // oldest
	ins(tr, "abcdefghij", "a")
	ins(tr, "ABCDEFGHIJ", "a")
	ins(tr, "0123456789", "a") // re-insert: now most recent
	ins(tr, "zzzz", "b")
	if got := tr.Evict(); got != 20 {
		t.Fatalf("evicted %d, want 20", got)
	}
	checkInvariants(t, tr)
	expect(t, tr, "0123456789", nil, "a", 10)
	expect(t, tr, "abcdefghij", nil, "", 0)
	expect(t, tr, "ABCDEFGHIJ", nil, "", 0)
	expect(t, tr, "zzzz", nil, "b", 4)
	if s := tr.Stats(); s.CharsPerTenant["a"] != 10 || s.Chars != 14 || s.Nodes != 2 {
		t.Fatalf("stats %+v", s)
	}
	// Partial eviction of a path: leaf first, then parent becomes a leaf.
	tr.SetOptions(Options{MaxCharsPerTenant: 8})
	ins(tr, "01234xyz", "a") // splits "0123456789" at 5
	// a: "01234"(5) "56789"(5) "xyz"(3) = 13; oldest leaf is "56789".
	tr.Evict()
	checkInvariants(t, tr)
	expect(t, tr, "0123456789", nil, "a", 5)
	expect(t, tr, "01234xyz", nil, "a", 8)
	if got := tr.Stats().CharsPerTenant["a"]; got != 8 {
		t.Fatalf("a over budget: %d", got)
	}
}

func TestEvictKeepsSharedNodes(t *testing.T) {
	tr := New(Options{MaxCharsPerTenant: 5})
	ins(tr, "hello world", "a")
	ins(tr, "hello", "b")
	tr.Evict() // a: "hello"(5) + " world"(6) -> drop " world"
	checkInvariants(t, tr)
	expect(t, tr, "hello world", onlyFilter(tr.Tenant("a")), "a", 5)
	expect(t, tr, "hello world", onlyFilter(tr.Tenant("b")), "b", 5)
	if s := tr.Stats(); s.Chars != 5 {
		t.Fatalf("chars %d", s.Chars)
	}
}

func TestEvictTotal(t *testing.T) {
	tr := New(Options{MaxCharsTotal: 25})
	ins(tr, "aaaaaaaaaa", "x") // oldest
	ins(tr, "bbbbbbbbbb", "y")
	ins(tr, "cccccccccc", "x")
	ins(tr, "dddddddddd", "y")
	ins(tr, "aaaaaaaaaa", "x") // touched: survives
	tr.Evict()                 // 40 -> must drop b and c (oldest after touch)
	checkInvariants(t, tr)
	expect(t, tr, "aaaaaaaaaa", nil, "x", 10)
	expect(t, tr, "dddddddddd", nil, "y", 10)
	expect(t, tr, "bbbbbbbbbb", nil, "", 0)
	expect(t, tr, "cccccccccc", nil, "", 0)
	if s := tr.Stats(); s.Chars != 20 {
		t.Fatalf("chars %d", s.Chars)
	}
	// A node shared by two tenants is only freed once both entries go.
	tr = New(Options{MaxCharsTotal: 5})
	ins(tr, "shared", "x")
	ins(tr, "shared", "y")
	ins(tr, "zz", "x")
	tr.Evict()
	checkInvariants(t, tr)
	if s := tr.Stats(); s.Chars > 5 {
		t.Fatalf("over total budget: %+v", s)
	}
	expect(t, tr, "zz", nil, "x", 2)
}

func TestRemoveTenant(t *testing.T) {
	tr := New(Options{})
	ins(tr, "abcdef", "a")
	ins(tr, "abcxyz", "b")
	ins(tr, "abc", "a")
	ins(tr, "qqq", "a")
	a := tr.Tenant("a")
	tr.RemoveTenant(a)
	checkInvariants(t, tr)
	for _, s := range []string{"abcdef", "abcxyz", "abc", "qqq", "q"} {
		if m := tr.Match([]byte(s), nil); m.Tenant == a {
			t.Fatalf("removed tenant returned for %q", s)
		}
	}
	expect(t, tr, "abcdef", nil, "b", 3)
	s := tr.Stats()
	if s.Tenants != 1 || s.Chars != 6 || s.Nodes != 2 {
		t.Fatalf("stats %+v", s)
	}
	if _, ok := s.CharsPerTenant["a"]; ok {
		t.Fatalf("removed tenant in stats")
	}
	if id, ok := tr.LookupTenant("a"); !ok || id != a || tr.TenantName(a) != "a" {
		t.Fatalf("tenant id not stable")
	}
	ins(tr, "abcdef", "a") // re-activates with the same ID
	expect(t, tr, "abcdef", nil, "a", 6)
	checkInvariants(t, tr)
	if tr.Stats().Tenants != 2 {
		t.Fatal("tenant not re-activated")
	}
}

func TestTenantInterning(t *testing.T) {
	tr := New(Options{})
	a := tr.Tenant("http://w1")
	if tr.Tenant("http://w1") != a {
		t.Fatal("not interned")
	}
	if _, ok := tr.LookupTenant("nope"); ok {
		t.Fatal("lookup created tenant")
	}
	tr.Insert(nil, a)
	if s := tr.Stats(); s.Tenants != 1 || s.CharsPerTenant["http://w1"] != 0 {
		t.Fatalf("%+v", s)
	}
	if n := testing.AllocsPerRun(100, func() { tr.Tenant("http://w1") }); n != 0 {
		t.Fatalf("Tenant allocates %v", n)
	}
	tr.Insert([]byte("x"), 99) // unknown ID ignored
	if tr.TenantName(99) != "" || tr.TenantName(NoTenant) != "" {
		t.Fatal("unknown name")
	}
}

func TestZeroAllocs(t *testing.T) {
	tr := New(Options{})
	p := []byte(strings.Repeat("system prompt ", 100) + "user 中文 question")
	id := tr.Tenant("a")
	tr.Insert(p, id)
	tr.Insert(p[:700], tr.Tenant("b"))
	f := allowSet{id: true}
	if n := testing.AllocsPerRun(100, func() { tr.Match(p, f) }); n != 0 {
		t.Fatalf("Match allocates %v", n)
	}
	if n := testing.AllocsPerRun(100, func() { tr.Insert(p, id) }); n != 0 {
		t.Fatalf("re-Insert allocates %v", n)
	}
}

func TestCountChars(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "中", "丫", "👋", "\x80", "\xe4", "\xff", "é", "\xe4\xb8"}
	for i := 0; i < 2000; i++ {
		var sb strings.Builder
		for j := r.IntN(40); j > 0; j-- {
			sb.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		s := []byte(sb.String())
		if got, want := countChars(s), utf8.RuneCount(s); got != want {
			t.Fatalf("countChars(%q)=%d want %d", s, got, want)
		}
		// isBoundary agrees with the decoder's segmentation.
		bound := map[int]bool{0: true, len(s): true}
		for p := 0; p < len(s); {
			_, sz := utf8.DecodeRune(s[p:])
			p += sz
			bound[p] = true
		}
		for p := 0; p <= len(s); p++ {
			if isBoundary(s, p) != bound[p] {
				t.Fatalf("isBoundary(%q,%d)=%v", s, p, !bound[p])
			}
		}
	}
}

func TestConcurrentStress(t *testing.T) {
	tr := New(Options{MaxCharsPerTenant: 400, MaxCharsTotal: 1500})
	names := []string{"w0", "w1", "w2", "w3", "w4"}
	prefixes := []string{"sys A: ", "sys B 中文: ", "系统提示：", "👋 hello "}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for i := 0; i < 3000; i++ {
				s := prefixes[r.IntN(len(prefixes))] + fmt.Sprint(r.IntN(50)) + strings.Repeat("é", r.IntN(5))
				id := tr.Tenant(names[r.IntN(len(names))])
				switch op := r.IntN(100); {
				case op < 45:
					tr.Insert([]byte(s), id)
				case op < 90:
					m := tr.Match([]byte(s), nil)
					if m.MatchedChars > m.InputChars || (m.Tenant == NoTenant && m.MatchedChars != 0) {
						t.Errorf("bad match %+v", m)
					}
				case op < 97:
					tr.Evict()
				default:
					tr.RemoveTenant(id)
				}
			}
		}(g)
	}
	wg.Wait()
	checkInvariants(t, tr)
	tr.Evict()
	checkInvariants(t, tr)
	s := tr.Stats()
	if s.Chars > 1500 {
		t.Fatalf("total budget violated: %d", s.Chars)
	}
	for n, c := range s.CharsPerTenant {
		if c > 400 {
			t.Fatalf("tenant %s over budget: %d", n, c)
		}
	}
	w0 := tr.Tenant("w0")
	tr.RemoveTenant(w0)
	checkInvariants(t, tr)
	for _, p := range prefixes {
		for i := 0; i < 50; i++ {
			if m := tr.Match([]byte(p+fmt.Sprint(i)), nil); m.Tenant == w0 {
				t.Fatalf("removed tenant matched")
			}
		}
	}
	if c := tr.state(w0).chars.Load(); c != 0 {
		t.Fatalf("removed tenant still has %d chars", c)
	}
}

// TestConcurrentMatchDuringSplits: with no eviction, a stored string must be
// fully matched (by a tenant that stored it) while other goroutines keep
// splitting nodes along its path.
func TestConcurrentMatchDuringSplits(t *testing.T) {
	tr := New(Options{})
	base := []string{"系统提示：你是一个乐于助人的助手。", "You are a helpful assistant. Answer briefly.", "👋🏽👋🏿 emoji prompt"}
	a := tr.Tenant("a")
	for _, s := range base {
		tr.Insert([]byte(s), a)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			id := tr.Tenant(fmt.Sprint("w", g))
			r := rand.New(rand.NewPCG(uint64(g), 3))
			for i := 0; i < 1500; i++ {
				s := []rune(base[r.IntN(len(base))])
				cut := r.IntN(len(s) + 1)
				tr.Insert([]byte(string(s[:cut])+fmt.Sprint(i)), id)
			}
		}(g)
	}
	var rg sync.WaitGroup
	for g := 0; g < 3; g++ {
		rg.Add(1)
		go func() {
			defer rg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, s := range base {
					m := tr.Match([]byte(s), onlyFilter(a))
					if m.Tenant != a || m.MatchedChars != utf8.RuneCountInString(s) {
						t.Errorf("Match(%q) = %+v during splits", s, m)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rg.Wait()
	checkInvariants(t, tr)
}
