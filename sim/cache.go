package sim

import "sync"

// prefixCache is a token trie with exact longest-prefix matching and LRU
// eviction of leaves. Every cached token is one trie node, so the cache size
// in tokens is the number of nodes.
//
// Eviction removes whole radix-tree nodes, as SGLang's RadixCache does: the
// least recently used leaf token and its unary chain up to the nearest
// branch point go together, so an evicted prompt suffix is gone entirely
// rather than trimmed token by token (which would leave long partial
// prefixes that a real engine does not keep).
//
// All nodes sit on one recency list. When a path is used it is moved to the
// front leaf-first, so every parent is always more recent than its children
// and the back of the list is always a leaf: eviction is O(1) per token and
// evicts the least recently used suffixes first.
type prefixCache struct {
	mu       sync.Mutex
	capacity int
	size     int
	root     cnode
	lru      cnode // sentinel: lru.next = most recent, lru.prev = least recent
	path     []*cnode
}

type cnode struct {
	key        uint64
	parent     *cnode
	one        *cnode            // the only child while there is at most one
	kids       map[uint64]*cnode // all children once there were two or more
	prev, next *cnode
}

func newPrefixCache(capacity int) *prefixCache {
	c := &prefixCache{capacity: capacity}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

func (n *cnode) child(k uint64) *cnode {
	if n.one != nil {
		if n.one.key == k {
			return n.one
		}
		return nil
	}
	if n.kids != nil {
		return n.kids[k]
	}
	return nil
}

func (n *cnode) addChild(c *cnode) {
	if n.one == nil && n.kids == nil {
		n.one = c
		return
	}
	if n.kids == nil {
		n.kids = map[uint64]*cnode{n.one.key: n.one}
		n.one = nil
	}
	n.kids[c.key] = c
}

func (n *cnode) removeChild(c *cnode) {
	if n.one == c {
		n.one = nil
		return
	}
	delete(n.kids, c.key)
}

func (n *cnode) hasChildren() bool { return n.one != nil || len(n.kids) > 0 }

func (c *prefixCache) unlink(n *cnode) {
	n.prev.next = n.next
	n.next.prev = n.prev
	n.prev, n.next = nil, nil
}

func (c *prefixCache) pushFront(n *cnode) {
	n.prev = &c.lru
	n.next = c.lru.next
	c.lru.next.prev = n
	c.lru.next = n
}

// peek returns the length of the longest cached prefix without touching
// recency.
func (c *prefixCache) peek(keys []uint64) int {
	if c == nil || c.capacity <= 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := &c.root
	for i, k := range keys {
		if n = n.child(k); n == nil {
			return i
		}
	}
	return len(keys)
}

// matchInsert returns the length of the longest cached prefix of keys, then
// inserts all of keys, marks the path most recently used and evicts down to
// capacity.
func (c *prefixCache) matchInsert(keys []uint64) int {
	if c == nil || c.capacity <= 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	path := c.path[:0]
	n := &c.root
	matched := -1
	for i, k := range keys {
		ch := n.child(k)
		if ch == nil {
			if matched < 0 {
				matched = i
			}
			ch = &cnode{key: k, parent: n}
			n.addChild(ch)
			c.size++
		} else {
			c.unlink(ch)
		}
		path = append(path, ch)
		n = ch
	}
	if matched < 0 {
		matched = len(keys)
	}
	for i := len(path) - 1; i >= 0; i-- {
		c.pushFront(path[i])
	}
	for i := range path {
		path[i] = nil
	}
	c.path = path[:0]
	c.evictLocked()
	return matched
}

func (c *prefixCache) evictLocked() {
	for c.size > c.capacity {
		n := c.lru.prev
		if n == &c.lru {
			return
		}
		if n.hasChildren() { // cannot happen; keep the invariant honest
			panic("sim: prefix cache LRU invariant broken")
		}
		for {
			p := n.parent
			c.unlink(n)
			p.removeChild(n)
			n.parent = nil
			c.size--
			if p == &c.root || p.hasChildren() {
				break
			}
			n = p
		}
	}
}

func (c *prefixCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

func (c *prefixCache) flush() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.root = cnode{}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	c.size = 0
}
