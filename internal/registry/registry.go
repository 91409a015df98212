// Package registry is the one home of sglroute state that must outlive a
// config reload: per-worker in-flight counters and the approximate prefix
// trees of each routing pool.
//
// Caddy rebuilds every module on each config load and runs the old modules'
// Cleanup while their requests may still be streaming (see
// reference/caddy-notes.md §0, §1.3). Module instances are therefore thin
// views: they take a reference to a named [Pool] in Provision and drop it in
// Cleanup, and because the new config provisions before the old one cleans
// up, a pool that is named in both configs is never destroyed.
package registry

import (
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"

	"github.com/sglroute/sglroute/tree"
)

// DefaultPool is the pool name used when a policy does not set one.
const DefaultPool = "default"

// pools holds every live Pool by name, reference-counted by the modules that
// use it. It is the package's only mutable global besides workers, and both
// exist precisely so that state survives reloads.
var pools = caddy.NewUsagePool()

// workers holds the in-flight counter of every worker address ever routed
// to. Load is a property of the worker, not of a pool or a handler: two
// reverse_proxy blocks that share a worker must see each other's requests.
var workers = newWorkerTable()

// Pool is the routing state shared by every module instance configured with
// the same pool name: one approximate prefix tree per model.
type Pool struct {
	name string

	mu    sync.Mutex                            // serialises copy-on-write of trees
	trees atomic.Pointer[map[string]*tree.Tree] // model -> tree, read without locks
	opts  atomic.Pointer[tree.Options]
}

// Destruct implements caddy.Destructor. Trees are plain memory; nothing to
// close.
func (p *Pool) Destruct() error { return nil }

// AcquirePool returns the pool with the given name, creating it on first
// use, and takes a reference that the caller must drop with ReleasePool.
// loaded tells whether the pool already existed (its state carried over
// from a previous config or another module).
func AcquirePool(name string) (p *Pool, loaded bool) {
	if name == "" {
		name = DefaultPool
	}
	v, loaded, _ := pools.LoadOrNew(name, func() (caddy.Destructor, error) {
		p := &Pool{name: name}
		empty := map[string]*tree.Tree{}
		p.trees.Store(&empty)
		p.opts.Store(&tree.Options{})
		return p, nil
	})
	return v.(*Pool), loaded
}

// ReleasePool drops a reference taken by AcquirePool. The pool is destroyed
// when its last reference is dropped.
func ReleasePool(name string) {
	if name == "" {
		name = DefaultPool
	}
	_, _ = pools.Delete(name)
}

// TreeCount returns how many models have a tree in the pool.
func (p *Pool) TreeCount() int { return len(*p.trees.Load()) }

// Name returns the pool's name.
func (p *Pool) Name() string { return p.name }

// SetTreeOptions applies budgets to every current and future tree of the
// pool. The last config to provision wins, which is what a reload wants.
func (p *Pool) SetTreeOptions(o tree.Options) {
	p.opts.Store(&o)
	for _, t := range *p.trees.Load() {
		t.SetOptions(o)
	}
}

// Tree returns the tree for a model, creating it on first use. It does not
// allocate when the tree exists.
func (p *Pool) Tree(model []byte) *tree.Tree {
	if t, ok := (*p.trees.Load())[string(model)]; ok {
		return t
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.trees.Load()
	if t, ok := old[string(model)]; ok {
		return t
	}
	t := tree.New(*p.opts.Load())
	next := make(map[string]*tree.Tree, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[string(model)] = t
	p.trees.Store(&next)
	return t
}

// Trees calls fn for every model's tree.
func (p *Pool) Trees(fn func(model string, t *tree.Tree)) {
	for m, t := range *p.trees.Load() {
		fn(m, t)
	}
}

// Evict enforces the tree budgets on every tree of the pool and returns the
// number of characters evicted.
func (p *Pool) Evict() int {
	n := 0
	for _, t := range *p.trees.Load() {
		n += t.Evict()
	}
	return n
}
