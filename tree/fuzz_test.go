package tree

import (
	"testing"
	"unicode/utf8"
)

// Tokens for fuzz strings: ASCII, CJK chars sharing first bytes (中 丫 乐),
// emoji, 2-byte, and invalid pieces that may or may not combine into valid
// chars when concatenated ("\xe4" + "\xb8\xad" == "中").
var fuzzTokens = []string{"a", "b", "中", "丫", "乐", "👋", "é", "\xe4", "\xb8\xad", "ab"}

const fuzzTenants = 3

// segment splits s into chars exactly as utf8.DecodeRune does.
func segment(s string) []string {
	var out []string
	for len(s) > 0 {
		_, n := utf8.DecodeRuneInString(s)
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

func lcpChars(a, b string) int {
	x, y := segment(a), segment(b)
	n := 0
	for n < len(x) && n < len(y) && x[n] == y[n] {
		n++
	}
	return n
}

// prefixSetSize is the number of distinct non-empty char prefixes of strs,
// i.e. the chars a tenant holding exactly these strings is charged for.
func prefixSetSize(strs map[string]int64) int {
	seen := map[string]bool{}
	for s := range strs {
		p := ""
		for _, c := range segment(s) {
			p += c
			seen[p] = true
		}
	}
	return len(seen)
}

// leafPaths extracts, per tenant, the root-to-leaf strings of its entries.
func leafPaths(tr *Tree) map[TenantID]map[string]bool {
	out := map[TenantID]map[string]bool{}
	var walk func(n *node, prefix string)
	walk = func(n *node, prefix string) {
		for _, c := range n.st.Load().children {
			cs := c.st.Load()
			p := prefix + string(cs.text)
			for _, e := range cs.tenants {
				leaf := true
				for _, cc := range cs.children {
					if cc.st.Load().tenantIndex(e.id) >= 0 {
						leaf = false
					}
				}
				if leaf {
					if out[e.id] == nil {
						out[e.id] = map[string]bool{}
					}
					out[e.id][p] = true
				}
			}
			walk(c, p)
		}
	}
	walk(&tr.root, "")
	return out
}

type fuzzModel struct {
	strs    [fuzzTenants]map[string]int64 // string -> ts of last insert
	clock   int64
	exactTS bool // false once an eviction happened (timestamps of inner nodes diverge from the string model)
}

type fuzzReader struct {
	b []byte
	i int
}

func (r *fuzzReader) next() (byte, bool) {
	if r.i >= len(r.b) {
		return 0, false
	}
	r.i++
	return r.b[r.i-1], true
}

func (r *fuzzReader) str() string {
	n, _ := r.next()
	s := ""
	for k := int(n % 7); k > 0; k-- {
		c, _ := r.next()
		s += fuzzTokens[int(c)%len(fuzzTokens)]
	}
	return s
}

func FuzzTreeAgainstModel(f *testing.F) {
	f.Add([]byte{0, 0, 3, 0, 1, 2, 4, 0, 3, 0, 1, 5})
	f.Add([]byte{0, 1, 4, 2, 2, 3, 4, 1, 0, 2, 4, 2, 2, 3, 8, 4, 0, 3, 2, 2, 3})
	f.Add([]byte{0, 0, 2, 7, 8, 1, 1, 1, 7, 4, 7, 2, 7, 8, 9, 6, 1, 0, 4, 7, 2, 7, 8})
	f.Add([]byte{0, 0, 6, 0, 1, 2, 3, 4, 5, 1, 1, 3, 0, 1, 6, 6, 3, 3, 4, 0, 6, 0, 1, 2, 3, 4, 5})
	f.Add([]byte{0, 0, 5, 1, 1, 1, 1, 1, 2, 1, 4, 1, 1, 1, 2, 6, 2, 0, 6, 0, 3, 0, 4, 3, 5, 1, 1, 1})
	f.Add([]byte{3, 2, 6, 6, 6, 7, 8, 3, 5, 0, 1, 2, 9, 9, 9, 7, 1, 4, 7, 3, 3, 0, 1, 2})
	f.Fuzz(fuzzBody)
}

func fuzzBody(t *testing.T, data []byte) {
	if len(data) > 512 { // 100 ops never need more; keeps minimization fast
		return
	}
	{
		tr := New(Options{})
		var ids [fuzzTenants]TenantID
		for i := range ids {
			ids[i] = tr.Tenant(string(rune('A' + i)))
		}
		m := &fuzzModel{exactTS: true}
		for i := range m.strs {
			m.strs[i] = map[string]int64{}
		}
		r := &fuzzReader{b: data}
		for steps := 0; steps < 100; steps++ {
			op, ok := r.next()
			if !ok {
				break
			}
			tb, _ := r.next()
			ti := int(tb) % fuzzTenants
			switch op % 8 {
			case 0, 1, 2, 3: // insert, half of them the way Select does it
				s := r.str()
				if tb&0x80 != 0 {
					var p Path
					b := []byte(s)
					tr.MatchPath(b, nil, &p)
					tr.InsertPath(b, ids[ti], &p)
				} else {
					tr.Insert([]byte(s), ids[ti])
				}
				if s != "" {
					m.clock++
					m.strs[ti][s] = m.clock
				}
			case 4, 5: // match
				s := r.str()
				mask := tb >> 2 & 7
				var filt Filter
				if mask != 0 {
					as := allowSet{}
					for k := 0; k < fuzzTenants; k++ {
						if mask&(1<<k) != 0 {
							as[ids[k]] = true
						}
					}
					filt = as
				}
				got := tr.Match([]byte(s), filt)
				checkMatch(t, m, ids, s, filt, got)
			case 6: // evict
				per, _ := r.next()
				totb, _ := r.next()
				o := Options{MaxCharsPerTenant: int(per % 12)}
				if totb%3 == 0 {
					o.MaxCharsTotal = int(totb%30) + 1
				}
				tr.SetOptions(o)
				before := leafPaths(tr)
				evicted := tr.Evict() > 0
				if evicted {
					m.exactTS = false
				}
				after := leafPaths(tr)
				st := tr.Stats()
				for k := 0; k < fuzzTenants; k++ {
					// Nothing invented: every surviving leaf path is a prefix of an old one.
					for p := range after[ids[k]] {
						found := false
						for q := range before[ids[k]] {
							if len(q) >= len(p) && q[:len(p)] == p {
								found = true
							}
						}
						if !found {
							t.Fatalf("evict invented %q for tenant %d", p, k)
						}
					}
					if c := int(tr.state(ids[k]).chars.Load()); o.MaxCharsPerTenant > 0 && c > o.MaxCharsPerTenant {
						t.Fatalf("tenant %d over budget after Evict: %d > %d", k, c, o.MaxCharsPerTenant)
					}
					// Resync the model with what survived (timestamps keep the
					// last insert of a surviving prefix's original string).
					if evicted {
						ns := map[string]int64{}
						for p := range after[ids[k]] {
							ns[p] = 0
						}
						m.strs[k] = ns
					}
				}
				if o.MaxCharsTotal > 0 && st.Chars > o.MaxCharsTotal {
					t.Fatalf("tree over total budget after Evict: %d > %d", st.Chars, o.MaxCharsTotal)
				}
			case 7: // remove tenant
				tr.RemoveTenant(ids[ti])
				m.strs[ti] = map[string]int64{}
			}
			if err := invariantErr(tr); err != nil {
				t.Fatal(err)
			}
			for k := 0; k < fuzzTenants; k++ {
				if got, want := int(tr.state(ids[k]).chars.Load()), prefixSetSize(m.strs[k]); got != want {
					t.Fatalf("tenant %d chars %d, model %d", k, got, want)
				}
			}
		}
	}
}

func checkMatch(t *testing.T, m *fuzzModel, ids [fuzzTenants]TenantID, s string, filt Filter, got Match) {
	t.Helper()
	in := utf8.RuneCountInString(s)
	if got.InputChars != in {
		t.Fatalf("Match(%q).InputChars = %d, want %d", s, got.InputChars, in)
	}
	best := make([]int, fuzzTenants)
	bestTS := make([]int64, fuzzTenants)
	maxM := 0
	for k := 0; k < fuzzTenants; k++ {
		if filt != nil && !filt.Eligible(ids[k]) {
			continue
		}
		for str, ts := range m.strs[k] {
			l := lcpChars(s, str)
			if l > best[k] || l == best[k] && ts > bestTS[k] {
				best[k], bestTS[k] = l, ts
			}
		}
		maxM = max(maxM, best[k])
	}
	if maxM == 0 {
		if got.Tenant != NoTenant || got.MatchedChars != 0 {
			t.Fatalf("Match(%q) = %+v, want no tenant", s, got)
		}
		return
	}
	if got.MatchedChars != maxM {
		t.Fatalf("Match(%q) = %+v, want %d matched chars (model %v)", s, got, maxM, m.strs)
	}
	k := int(got.Tenant)
	if k < 0 || k >= fuzzTenants || best[k] != maxM || (filt != nil && !filt.Eligible(got.Tenant)) {
		t.Fatalf("Match(%q) = %+v: tenant does not achieve %d", s, got, maxM)
	}
	if m.exactTS {
		want := -1
		for j := 0; j < fuzzTenants; j++ {
			if best[j] == maxM && (want < 0 || bestTS[j] > bestTS[want]) {
				want = j
			}
		}
		if k != want {
			t.Fatalf("Match(%q) = tenant %d, want most recent %d", s, k, want)
		}
	}
}
