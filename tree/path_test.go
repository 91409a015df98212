package tree

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// InsertPath after MatchPath must leave the tree exactly as Insert would.
func TestInsertPathEqualsInsert(t *testing.T) {
	alphabet := []string{"a", "b", "ab", "中", "丫", "😀", "xyz"}
	rng := rand.New(rand.NewPCG(3, 4))
	word := func() []byte {
		var b []byte
		for n := rng.IntN(6); n >= 0; n-- {
			b = append(b, alphabet[rng.IntN(len(alphabet))]...)
		}
		return b
	}
	viaPath, plain := New(Options{}), New(Options{})
	names := []string{"w0", "w1", "w2"}
	for _, tr := range []*Tree{viaPath, plain} {
		for _, n := range names {
			tr.Tenant(n)
		}
	}
	var p Path
	for i := 0; i < 3000; i++ {
		text := word()
		id := TenantID(rng.IntN(len(names)))
		m1 := viaPath.MatchPath(text, nil, &p)
		m2 := plain.Match(text, nil)
		if m1 != m2 {
			t.Fatalf("op %d: MatchPath %+v, Match %+v", i, m1, m2)
		}
		viaPath.InsertPath(text, id, &p)
		plain.Insert(text, id)
		if i%97 == 0 {
			budget := Options{MaxCharsPerTenant: 20 + rng.IntN(40)}
			viaPath.SetOptions(budget)
			plain.SetOptions(budget)
			if a, b := viaPath.Evict(), plain.Evict(); a != b {
				t.Fatalf("op %d: evicted %d vs %d chars", i, a, b)
			}
		}
	}
	if a, b := viaPath.Stats(), plain.Stats(); !reflect.DeepEqual(a, b) {
		t.Fatalf("trees differ:\n%+v\n%+v", a, b)
	}
	checkInvariants(t, viaPath)
}

func TestInsertPathFallsBack(t *testing.T) {
	tr := New(Options{})
	w0, w1 := tr.Tenant("w0"), tr.Tenant("w1")
	tr.Insert([]byte("hello world"), w0)
	var p Path

	// A text that ends inside a node is no full path: the node must split.
	tr.MatchPath([]byte("hello"), nil, &p)
	tr.InsertPath([]byte("hello"), w1, &p)
	if m := tr.Match([]byte("hello"), &only{w1}); m.MatchedChars != 5 || m.Tenant != w1 {
		t.Fatalf("prefix insert through a path: %+v", m)
	}

	// The path changed between match and insert (a concurrent split).
	text := []byte("hello world")
	tr.MatchPath(text, nil, &p)
	tr.Insert([]byte("hello there"), w0)
	tr.InsertPath(text, w1, &p)
	if m := tr.Match(text, &only{w1}); m.MatchedChars != 11 {
		t.Fatalf("after a concurrent split w1 holds %d chars of %q, want 11", m.MatchedChars, text)
	}

	// Another slice with the same bytes is not the matched text.
	other := append([]byte(nil), text...)
	tr.MatchPath(text, nil, &p)
	tr.InsertPath(other, w0, &p)
	checkInvariants(t, tr)
}

func TestInsertPathAllocatesNothing(t *testing.T) {
	tr := New(Options{})
	w := tr.Tenant("w")
	text := []byte("a long enough prompt with a system part and a question")
	tr.Insert(text, w)
	var p Path
	if n := testing.AllocsPerRun(100, func() {
		tr.MatchPath(text, nil, &p)
		tr.InsertPath(text, w, &p)
	}); n != 0 {
		t.Errorf("MatchPath+InsertPath allocates %.0f", n)
	}
}

type only struct{ id TenantID }

func (o *only) Eligible(id TenantID) bool { return id == o.id }

func TestPathReset(t *testing.T) {
	tr := New(Options{})
	w0, w1 := tr.Tenant("w0"), tr.Tenant("w1")
	text := []byte("some prompt")
	tr.Insert(text, w0)
	tr.Insert(text, w1)
	var p Path
	tr.MatchPath(text, nil, &p)
	// The buffer is recycled for another text of the same length.
	copy(text, "other words")
	p.Reset()
	tr.InsertPath(text, w0, &p)
	if m := tr.Match([]byte("other words"), &only{w0}); m.MatchedChars != 11 {
		t.Fatalf("after Reset the new text was not inserted: %+v", m)
	}
}
