package tree

import (
	"bytes"
	"container/heap"
	"runtime"
	"sync"
	"sync/atomic"
)

// Options are the eviction budgets of a Tree. Zero values mean unlimited.
type Options struct {
	// MaxCharsPerTenant is SGLang's max_tree_size semantics: Evict trims every
	// tenant's char count (the chars of all nodes it is on) down to this.
	// 0 = unlimited.
	MaxCharsPerTenant int
	// MaxCharsTotal is a per-tree budget over the distinct characters stored
	// in the tree (the sum of node text lengths in chars). 0 = unlimited.
	MaxCharsTotal int
}

// Match is the result of Tree.Match.
type Match struct {
	// Tenant is the chosen tenant, or NoTenant.
	Tenant TenantID
	// MatchedChars is the number of leading chars of the input that Tenant
	// is believed to have cached (0 when Tenant is NoTenant).
	MatchedChars int
	// InputChars is the length of the input in chars.
	InputChars int
}

// Stats is a snapshot of a Tree's size.
type Stats struct {
	// Nodes is the number of nodes, excluding the root.
	Nodes int
	// Chars is the number of distinct chars stored (sum of node text lengths).
	Chars int
	// Tenants is the number of active tenants (interned and not removed).
	Tenants int
	// CharsPerTenant maps each active tenant's name to its char count.
	CharsPerTenant map[string]int
}

// tenantEntry records that a tenant is (probably) caching a node's prefix.
// Entries are shared by all published states of a node, so touches (atomic
// updates of ts) are never lost when a writer publishes a new state.
type tenantEntry struct {
	id TenantID
	ts atomic.Int64
}

// nstate is an immutable snapshot of a node, published through node.st.
// Writers build a modified copy under node.mu and Store it; readers Load it
// without locking (read-copy-update). Byte contents of text are never
// written after a state is published.
type nstate struct {
	parent   *node
	text     []byte
	chars    int
	keys     []uint32 // sorted first-char keys of children
	children []*node  // parallel to keys
	tenants  []*tenantEntry
	removed  bool
}

type node struct {
	mu sync.Mutex // serializes writers of this node; readers never take it
	st atomic.Pointer[nstate]
}

// Tree is a concurrent approximate multi-tenant radix tree. The zero value is
// not usable; call New.
type Tree struct {
	root  node // empty text, never holds tenants
	clock atomic.Int64
	opts  atomic.Pointer[Options]

	totalChars atomic.Int64
	nodes      atomic.Int64

	tmu     sync.Mutex // serializes tenant creation
	names   atomic.Pointer[map[string]TenantID]
	tenants atomic.Pointer[[]*tenantState]

	evictMu sync.Mutex // serializes Evict and RemoveTenant passes
}

// New returns an empty Tree with the given budgets.
func New(opts Options) *Tree {
	t := &Tree{}
	t.SetOptions(opts)
	m := map[string]TenantID{}
	t.names.Store(&m)
	s := []*tenantState{}
	t.tenants.Store(&s)
	t.root.st.Store(&nstate{})
	return t
}

// SetOptions atomically replaces the budgets. They take effect at the next
// Evict.
func (t *Tree) SetOptions(opts Options) {
	o := opts
	t.opts.Store(&o)
}

// child returns the index where key is or would be inserted and the child
// with that key (nil if none).
func (s *nstate) child(key uint32) (int, *node) {
	lo, hi := 0, len(s.keys)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.keys[m] < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(s.keys) && s.keys[lo] == key {
		return lo, s.children[lo]
	}
	return lo, nil
}

func (s *nstate) tenantIndex(id TenantID) int {
	for i, e := range s.tenants {
		if e.id == id {
			return i
		}
	}
	return -1
}

func (s *nstate) clone() *nstate {
	c := *s
	return &c
}

// withChild returns a copy of s with child c (key) inserted at index i.
func (s *nstate) withChild(i int, key uint32, c *node) *nstate {
	ns := s.clone()
	ns.keys = make([]uint32, len(s.keys)+1)
	copy(ns.keys, s.keys[:i])
	ns.keys[i] = key
	copy(ns.keys[i+1:], s.keys[i:])
	ns.children = make([]*node, len(s.children)+1)
	copy(ns.children, s.children[:i])
	ns.children[i] = c
	copy(ns.children[i+1:], s.children[i:])
	return ns
}

// withoutChild returns a copy of s without child c.
func (s *nstate) withoutChild(c *node) *nstate {
	ns := s.clone()
	ns.keys = make([]uint32, 0, len(s.keys))
	ns.children = make([]*node, 0, len(s.children))
	for i, ch := range s.children {
		if ch != c {
			ns.keys = append(ns.keys, s.keys[i])
			ns.children = append(ns.children, ch)
		}
	}
	return ns
}

// touch raises e's timestamp to at least now (monotone, atomic).
func touch(e *tenantEntry, now int64) {
	for {
		cur := e.ts.Load()
		if cur >= now || e.ts.CompareAndSwap(cur, now) {
			return
		}
	}
}

// maxRestarts bounds optimistic retries before yielding the processor.
const maxRestarts = 8

// Match finds the tenant most likely to have text's longest prefix cached.
// It walks from the root along text; the deepest node on that path holding
// at least one eligible tenant decides, and among that node's eligible
// tenants the most recently inserted one wins. MatchedChars counts chars from
// the root through that node (the partial chars of a partially matched last
// node included). Match takes no locks, never modifies the tree and does not
// allocate.
func (t *Tree) Match(text []byte, f Filter) Match {
	return t.MatchPath(text, f, nil)
}

// maxPathLen bounds how many nodes a Path remembers; deeper paths fall back
// to a plain Insert.
const maxPathLen = 64

// Path remembers the nodes a MatchPath walked, so that an InsertPath of the
// same text right after it (the select-then-record step of a router) can
// stamp them without comparing the text again. The zero value is ready to
// use; a Path is not safe for concurrent use.
type Path struct {
	steps [maxPathLen]pathStep
	n     int
	text  []byte
	full  bool // text ended exactly at the end of steps[n-1]
}

// Reset forgets the recorded path, so that a following InsertPath is a
// plain Insert. Callers that reuse a Path across texts whose memory may be
// recycled must Reset it when they did not just match.
func (p *Path) Reset() { p.n, p.text, p.full = 0, nil, false }

type pathStep struct {
	node *node
	st   *nstate
}

// MatchPath is Match that also records the walked path in p (if not nil).
func (t *Tree) MatchPath(text []byte, f Filter, p *Path) Match {
	for r := 0; ; r++ {
		if res, ok := t.match(text, f, p); ok {
			return res
		}
		if r >= maxRestarts {
			runtime.Gosched()
		}
	}
}

// match is one optimistic attempt; ok is false if a concurrent split or
// unlink was observed and the walk must restart.
func (t *Tree) match(text []byte, f Filter, p *Path) (res Match, ok bool) {
	res.Tenant = NoTenant
	n := &t.root
	s := n.st.Load()
	var deepest *nstate // deepest node on the path with an eligible tenant
	pos, chars := 0, 0
	overflow := false // the path is deeper than a Path holds
	exact := true     // every node walked was matched whole
	if p != nil {
		p.n, p.text, p.full = 0, text, false
		defer func() {
			p.full = ok && exact && !overflow && pos == len(text) && p.n > 0
		}()
	}
	for pos < len(text) {
		rest := text[pos:]
		_, c := s.child(firstKey(rest))
		if c == nil {
			break
		}
		cs := c.st.Load()
		if cs.parent != n || cs.removed {
			return res, false
		}
		n, s = c, cs
		if !anyEligible(cs.tenants, f) {
			// Tenants on a child are a subset of those on its parent, so
			// nothing deeper can be eligible.
			break
		}
		m := matchLen(rest, cs.text)
		deepest = cs
		if m == len(cs.text) {
			chars += cs.chars
			pos += m
			if p != nil {
				if p.n < maxPathLen {
					p.steps[p.n] = pathStep{c, cs}
					p.n++
				} else {
					overflow = true
				}
			}
			continue
		}
		chars += countChars(rest[:m])
		pos += m
		exact = false
		break
	}
	if deepest != nil {
		res.MatchedChars = chars
		bestTS := int64(-1)
		for _, e := range deepest.tenants {
			if f == nil || f.Eligible(e.id) {
				if ts := e.ts.Load(); ts > bestTS {
					res.Tenant, bestTS = e.id, ts
				}
			}
		}
		if res.Tenant == NoTenant { // only with a non-deterministic Filter
			res.MatchedChars = 0
		}
	}
	res.InputChars = chars + countChars(text[pos:])
	return res, true
}

func anyEligible(es []*tenantEntry, f Filter) bool {
	if f == nil {
		return len(es) > 0
	}
	for _, e := range es {
		if f.Eligible(e.id) {
			return true
		}
	}
	return false
}

// Insert records that tenant has text cached: the tenant is added to every
// node on text's path (splitting/creating nodes as needed) and the whole path
// is stamped with a fresh timestamp for the tenant. Re-inserting an existing
// (text, tenant) takes no locks (atomic timestamp updates only) and does not
// allocate. Insert("") only registers (re-activates) the tenant. Unknown IDs
// are ignored.
func (t *Tree) Insert(text []byte, tenant TenantID) {
	st := t.state(tenant)
	if st == nil {
		return
	}
	if !st.active.Load() {
		st.active.Store(true)
	}
	if len(text) == 0 {
		return
	}
	now := t.clock.Add(1)
	for r := 0; ; r++ {
		done, ok := t.touchPath(text, tenant, now)
		if done {
			return
		}
		if ok {
			break
		}
		if r >= maxRestarts {
			runtime.Gosched()
		}
	}
	t.insertSlow(text, tenant, st, now)
}

// InsertPath is Insert for the text that the MatchPath which filled p was
// given. When that match consumed the whole text and no node on the path
// has changed since (same published states) and tenant is on every node, it
// only stamps the path: no text comparison, no lock, no allocation.
// Otherwise it is Insert.
func (t *Tree) InsertPath(text []byte, tenant TenantID, p *Path) {
	if p == nil || !p.full || len(p.text) != len(text) || len(text) == 0 || &p.text[0] != &text[0] {
		t.Insert(text, tenant)
		return
	}
	st := t.state(tenant)
	if st == nil {
		return
	}
	for i := 0; i < p.n; i++ {
		ps := p.steps[i]
		if ps.node.st.Load() != ps.st || ps.st.tenantIndex(tenant) < 0 {
			t.Insert(text, tenant)
			return
		}
	}
	if !st.active.Load() {
		st.active.Store(true)
	}
	now := t.clock.Add(1)
	for i := 0; i < p.n; i++ {
		s := p.steps[i].st
		touch(s.tenants[s.tenantIndex(tenant)], now)
	}
}

// touchPath stamps the path of text for tenant without locks. done reports
// that the path exists exactly (ending on a node boundary) with the tenant on
// every node; ok is false if the walk must restart.
func (t *Tree) touchPath(text []byte, tenant TenantID, now int64) (done, ok bool) {
	n := &t.root
	s := n.st.Load()
	pos := 0
	for pos < len(text) {
		rest := text[pos:]
		_, c := s.child(firstKey(rest))
		if c == nil {
			return false, true
		}
		cs := c.st.Load()
		if cs.parent != n || cs.removed {
			return false, false
		}
		n, s = c, cs
		m := matchLen(rest, cs.text)
		i := cs.tenantIndex(tenant)
		if m != len(cs.text) || i < 0 {
			return false, true
		}
		touch(cs.tenants[i], now)
		pos += m
	}
	return true, true
}

func newEntry(id TenantID, ts int64) *tenantEntry {
	e := &tenantEntry{id: id}
	e.ts.Store(ts)
	return e
}

// insertSlow inserts with writer-lock coupling from the root: a node's
// mutex is taken before its parent's is released, always top-down.
func (t *Tree) insertSlow(text []byte, tenant TenantID, st *tenantState, now int64) {
	n := &t.root
	n.mu.Lock()
	s := n.st.Load()
	pos := 0
	for pos < len(text) {
		rest := text[pos:]
		key := firstKey(rest)
		i, c := s.child(key)
		if c == nil {
			ls := &nstate{parent: n, text: bytes.Clone(rest)}
			ls.chars = countChars(ls.text)
			ls.tenants = []*tenantEntry{newEntry(tenant, now)}
			leaf := &node{}
			leaf.st.Store(ls)
			n.st.Store(s.withChild(i, key, leaf))
			st.chars.Add(int64(ls.chars))
			t.totalChars.Add(int64(ls.chars))
			t.nodes.Add(1)
			break
		}
		c.mu.Lock()
		cs := c.st.Load()
		m := matchLen(rest, cs.text)
		if m < len(cs.text) {
			// Split: mid takes the first m bytes (and copies of c's
			// tenant entries); c keeps the suffix and hangs below mid.
			// Both halves are copied so neither keeps the other's bytes
			// alive once one is evicted (memory follows the char budget).
			ms := &nstate{parent: n, text: bytes.Clone(cs.text[:m])}
			ms.chars = countChars(ms.text)
			ms.tenants = make([]*tenantEntry, len(cs.tenants))
			for j, e := range cs.tenants {
				ms.tenants[j] = newEntry(e.id, e.ts.Load())
			}
			ncs := cs.clone()
			ncs.text = bytes.Clone(cs.text[m:])
			ncs.chars -= ms.chars
			ms.keys = []uint32{firstKey(ncs.text)}
			ms.children = []*node{c}
			mid := &node{}
			mid.mu.Lock()
			mid.st.Store(ms)
			ns := s.clone()
			ns.children = append([]*node(nil), s.children...)
			ns.children[i] = mid
			n.st.Store(ns)
			s = ns
			ncs.parent = mid
			c.st.Store(ncs)
			c.mu.Unlock()
			t.nodes.Add(1)
			c, cs = mid, ms
		}
		if j := cs.tenantIndex(tenant); j >= 0 {
			touch(cs.tenants[j], now)
		} else {
			ncs := cs.clone()
			ncs.tenants = make([]*tenantEntry, len(cs.tenants), len(cs.tenants)+1)
			copy(ncs.tenants, cs.tenants)
			ncs.tenants = append(ncs.tenants, newEntry(tenant, now))
			c.st.Store(ncs)
			cs = ncs
			st.chars.Add(int64(cs.chars))
		}
		n.mu.Unlock()
		n, s = c, cs
		pos += m
	}
	n.mu.Unlock()
}

// entry is an eviction candidate: tenant id is (believed to be) on n and on
// none of n's children.
type entry struct {
	ts int64
	id TenantID
	n  *node
}

type entryHeap []entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].ts < h[j].ts }
func (h entryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *entryHeap) Push(x any)        { *h = append(*h, x.(entry)) }
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// collect appends leaf entries below (and including) n. If only is not
// NoTenant, only that tenant's entries are collected. It returns the tenants
// present on n (snapshot).
func collect(n *node, only TenantID, out *entryHeap) []TenantID {
	s := n.st.Load()
	ids := make([]TenantID, len(s.tenants))
	for i, e := range s.tenants {
		ids[i] = e.id
	}
	var below map[TenantID]bool
	for _, c := range s.children {
		cids := collect(c, only, out)
		if len(cids) > 0 && below == nil {
			below = map[TenantID]bool{}
		}
		for _, id := range cids {
			below[id] = true
		}
	}
	for i, id := range ids {
		if (only == NoTenant || id == only) && !below[id] {
			*out = append(*out, entry{ts: s.tenants[i].ts.Load(), id: id, n: n})
		}
	}
	return ids
}

// removeEntry removes tenant id from x if x is still a leaf for it. It
// returns the chars removed from the tenant's count, and the parent (with the
// tenant's timestamp there) as a new candidate if the parent holds id.
func (t *Tree) removeEntry(x *node, id TenantID, st *tenantState) (removed int, next entry, ok bool) {
	for {
		xs := x.st.Load()
		p := xs.parent
		if p == nil || xs.removed {
			return 0, entry{}, false
		}
		p.mu.Lock()
		x.mu.Lock()
		xs = x.st.Load()
		if xs.removed || xs.parent != p {
			x.mu.Unlock()
			p.mu.Unlock()
			if xs.removed {
				return 0, entry{}, false
			}
			continue
		}
		i := xs.tenantIndex(id)
		leaf := i >= 0
		for _, c := range xs.children {
			if !leaf {
				break
			}
			// Lock the child: an insert may have passed x and be about to
			// add id to c while holding c.mu.
			c.mu.Lock()
			if c.st.Load().tenantIndex(id) >= 0 {
				leaf = false
			}
			c.mu.Unlock()
		}
		if !leaf {
			x.mu.Unlock()
			p.mu.Unlock()
			return 0, entry{}, false
		}
		nxs := xs.clone()
		nxs.tenants = make([]*tenantEntry, 0, len(xs.tenants)-1)
		nxs.tenants = append(nxs.tenants, xs.tenants[:i]...)
		nxs.tenants = append(nxs.tenants, xs.tenants[i+1:]...)
		removed = xs.chars
		st.chars.Add(-int64(xs.chars))
		if len(nxs.tenants) == 0 && len(nxs.children) == 0 {
			// Unlink: publish the parent without x first, then mark x.
			p.st.Store(p.st.Load().withoutChild(x))
			nxs.removed = true
			t.totalChars.Add(-int64(xs.chars))
			t.nodes.Add(-1)
		}
		x.st.Store(nxs)
		if p != &t.root {
			ps := p.st.Load()
			if j := ps.tenantIndex(id); j >= 0 {
				next, ok = entry{ts: ps.tenants[j].ts.Load(), id: id, n: p}, true
			}
		}
		x.mu.Unlock()
		p.mu.Unlock()
		return removed, next, ok
	}
}

// Evict enforces both budgets by removing the least recently touched
// (tenant, leaf node) entries first, where a node is a leaf for a tenant if
// the tenant is on it and on none of its children. An entry is evicted if its
// tenant is over MaxCharsPerTenant or the tree is over MaxCharsTotal. A node
// left without tenants (and children) is unlinked. It returns the number of
// tenant-chars removed (the sum of the removed entries' node lengths).
// Concurrent Evict/RemoveTenant calls are serialized; Match and Insert keep
// running.
func (t *Tree) Evict() (evictedChars int) {
	o := *t.opts.Load()
	per, tot := int64(o.MaxCharsPerTenant), int64(o.MaxCharsTotal)
	states := *t.tenants.Load()
	over := func() bool {
		if tot > 0 && t.totalChars.Load() > tot {
			return true
		}
		if per > 0 {
			for _, st := range states {
				if st.chars.Load() > per {
					return true
				}
			}
		}
		return false
	}
	if !over() {
		return 0
	}
	t.evictMu.Lock()
	defer t.evictMu.Unlock()
	states = *t.tenants.Load()
	var h entryHeap
	collect(&t.root, NoTenant, &h)
	heap.Init(&h)
	for h.Len() > 0 {
		e := heap.Pop(&h).(entry)
		if e.n == &t.root {
			continue
		}
		st := states[e.id]
		if !(tot > 0 && t.totalChars.Load() > tot) && !(per > 0 && st.chars.Load() > per) {
			continue
		}
		r, next, ok := t.removeEntry(e.n, e.id, st)
		evictedChars += r
		if ok {
			heap.Push(&h, next)
		}
	}
	return evictedChars
}

// RemoveTenant removes the tenant from every node, unlinking nodes left
// empty, so Match never returns it until it is inserted again. The ID stays
// interned (IDs are never reused) and the tenant becomes inactive (absent
// from Stats) until the next Tenant or Insert call for it.
func (t *Tree) RemoveTenant(id TenantID) {
	st := t.state(id)
	if st == nil {
		return
	}
	st.active.Store(false)
	t.evictMu.Lock()
	defer t.evictMu.Unlock()
	var h entryHeap
	collect(&t.root, id, &h)
	for len(h) > 0 {
		e := h[len(h)-1]
		h = h[:len(h)-1]
		if e.n == &t.root {
			continue
		}
		if _, next, ok := t.removeEntry(e.n, id, st); ok {
			h = append(h, next)
		}
	}
}

// Stats returns counters describing the tree. Nodes and Chars are
// maintained incrementally; under concurrent mutation the values are a
// best-effort snapshot.
func (t *Tree) Stats() Stats {
	s := Stats{
		Nodes:          int(t.nodes.Load()),
		Chars:          int(t.totalChars.Load()),
		CharsPerTenant: map[string]int{},
	}
	for _, st := range *t.tenants.Load() {
		if st.active.Load() {
			s.Tenants++
			s.CharsPerTenant[st.name] = int(st.chars.Load())
		}
	}
	return s
}
