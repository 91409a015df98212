package tree

import (
	"fmt"
	"sort"
	"testing"
	"unicode/utf8"
)

// checkInvariants walks the (quiescent) tree and verifies structural and
// accounting invariants.
func checkInvariants(t testing.TB, tr *Tree) {
	t.Helper()
	if err := invariantErr(tr); err != nil {
		t.Fatal(err)
	}
}

func invariantErr(tr *Tree) error {
	per := map[TenantID]int{}
	nodes, chars := 0, 0
	var walk func(n *node, parentTenants map[TenantID]bool) error
	walk = func(n *node, parentTenants map[TenantID]bool) error {
		s := n.st.Load()
		if !sort.SliceIsSorted(s.keys, func(i, j int) bool { return s.keys[i] < s.keys[j] }) {
			return fmt.Errorf("keys not sorted")
		}
		if len(s.keys) != len(s.children) {
			return fmt.Errorf("keys/children length mismatch")
		}
		for i, c := range s.children {
			cs := c.st.Load()
			if cs.parent != n {
				return fmt.Errorf("bad parent pointer at %q", cs.text)
			}
			if cs.removed {
				return fmt.Errorf("removed node still linked")
			}
			if len(cs.text) == 0 {
				return fmt.Errorf("empty node text")
			}
			if firstKey(cs.text) != s.keys[i] {
				return fmt.Errorf("key mismatch for %q", cs.text)
			}
			if cs.chars != utf8.RuneCount(cs.text) {
				return fmt.Errorf("chars %d != runecount %d for %q", cs.chars, utf8.RuneCount(cs.text), cs.text)
			}
			if len(cs.tenants) == 0 {
				return fmt.Errorf("node %q without tenants", cs.text)
			}
			nodes++
			chars += cs.chars
			mine := map[TenantID]bool{}
			for _, e := range cs.tenants {
				if mine[e.id] {
					return fmt.Errorf("duplicate tenant %d on %q", e.id, cs.text)
				}
				mine[e.id] = true
				if parentTenants != nil && !parentTenants[e.id] {
					return fmt.Errorf("tenant %d on %q but not on parent", e.id, cs.text)
				}
				per[e.id] += cs.chars
			}
			if err := walk(c, mine); err != nil {
				return err
			}
		}
		return nil
	}
	if len(tr.root.st.Load().tenants) != 0 {
		return fmt.Errorf("root has tenants")
	}
	if err := walk(&tr.root, nil); err != nil {
		return err
	}
	if int(tr.nodes.Load()) != nodes {
		return fmt.Errorf("nodes counter %d != %d", tr.nodes.Load(), nodes)
	}
	if int(tr.totalChars.Load()) != chars {
		return fmt.Errorf("total chars counter %d != %d", tr.totalChars.Load(), chars)
	}
	for id, st := range *tr.tenants.Load() {
		if got, want := int(st.chars.Load()), per[TenantID(id)]; got != want {
			return fmt.Errorf("tenant %s chars %d, recomputed %d", st.name, got, want)
		}
	}
	return nil
}

type allowSet map[TenantID]bool

func (a allowSet) Eligible(id TenantID) bool { return a[id] }

type onlyFilter TenantID

func (o onlyFilter) Eligible(id TenantID) bool { return TenantID(o) == id }
