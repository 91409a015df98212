package registry

import (
	"sync"
	"testing"

	"github.com/sglroute/sglroute/tree"
)

func TestLeaseReleasesExactlyOnce(t *testing.T) {
	w := WorkerFor(t.Name())
	var l Lease
	w.Acquire()
	l.Hold(w)
	var wg sync.WaitGroup
	// The normal end, an abort and a context callback race to release.
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); l.Close() }()
	}
	wg.Wait()
	if got := w.Load(); got != 0 {
		t.Fatalf("load after concurrent releases = %d, want 0", got)
	}
	if got := w.Processed(); got != 1 {
		t.Fatalf("processed = %d, want 1", got)
	}
}

func TestLeaseHoldAfterCloseReleases(t *testing.T) {
	// A retry that selects a worker after its request already ended must
	// not leave the slot taken.
	w := WorkerFor(t.Name())
	var l Lease
	l.Close()
	w.Acquire()
	l.Hold(w)
	if got := w.Load(); got != 0 {
		t.Fatalf("load = %d, want 0", got)
	}
	l.Reopen()
	w.Acquire()
	l.Hold(w)
	if got := w.Load(); got != 1 {
		t.Fatalf("reopened lease: load = %d, want 1", got)
	}
	// Holding another worker releases the first (a retry).
	w2 := WorkerFor(t.Name() + "-2")
	w2.Acquire()
	l.Hold(w2)
	if w.Load() != 0 || w2.Load() != 1 {
		t.Fatalf("after re-hold: %d %d, want 0 1", w.Load(), w2.Load())
	}
	l.Release()
	l.Release()
	if w2.Load() != 0 {
		t.Fatalf("double release: %d", w2.Load())
	}
}

func TestTryAcquireSeesStaleLoad(t *testing.T) {
	w := WorkerFor(t.Name())
	if !w.TryAcquire(0) {
		t.Fatal("TryAcquire(0) on an idle worker failed")
	}
	if w.TryAcquire(0) {
		t.Fatal("TryAcquire(0) succeeded although the load is 1")
	}
	var l Lease
	l.Hold(w)
	l.Release()
}

func TestWorkerForIsStable(t *testing.T) {
	a := WorkerFor(t.Name())
	if WorkerFor(t.Name()) != a {
		t.Fatal("WorkerFor returned a different worker for the same address")
	}
	if n := testing.AllocsPerRun(100, func() { WorkerFor(t.Name()) }); n != 0 {
		t.Errorf("WorkerFor of a known worker allocates %.0f", n)
	}
	found := false
	Workers(func(w *Worker) { found = found || w == a })
	if !found {
		t.Error("Workers does not list the worker")
	}
}

func TestPoolSurvivesReload(t *testing.T) {
	name := t.Name()
	old, loaded := AcquirePool(name) // the running config
	if loaded {
		t.Fatal("a new pool reported as loaded")
	}
	tr := old.Tree([]byte("model"))
	tr.Insert([]byte("hello world"), tr.Tenant("w0"))

	// A reload provisions the new config first, then cleans up the old one.
	next, loaded := AcquirePool(name)
	ReleasePool(name)
	if next != old || !loaded || next.TreeCount() != 1 {
		t.Fatalf("the new config got pool %p (loaded %v, %d trees), want the old one %p", next, loaded, next.TreeCount(), old)
	}
	if m := next.Tree([]byte("model")).Match([]byte("hello world"), nil); m.MatchedChars != 11 {
		t.Fatalf("tree after reload matched %d chars, want 11", m.MatchedChars)
	}

	// New options apply to surviving trees.
	next.SetTreeOptions(tree.Options{MaxCharsPerTenant: 5})
	next.Evict()
	if c := next.Tree([]byte("model")).TenantChars(tr.Tenant("w0")); c > 5 {
		t.Errorf("after a new budget of 5 chars the tenant holds %d", c)
	}

	// Once no config names the pool, it goes away.
	ReleasePool(name)
	fresh, _ := AcquirePool(name)
	defer ReleasePool(name)
	if fresh == old {
		t.Fatal("pool survived its last reference")
	}
}

func TestPoolTreeLookupDoesNotAllocate(t *testing.T) {
	p, _ := AcquirePool(t.Name())
	defer ReleasePool(t.Name())
	model := []byte("some-model")
	a := p.Tree(model)
	if p.Tree(model) != a || p.Tree([]byte("other")) == a {
		t.Fatal("trees are not per model")
	}
	if n := testing.AllocsPerRun(100, func() { p.Tree(model) }); n != 0 {
		t.Errorf("Tree of a known model allocates %.0f", n)
	}
	models := 0
	p.Trees(func(string, *tree.Tree) { models++ })
	if models != 2 {
		t.Errorf("Trees listed %d models, want 2", models)
	}
}
