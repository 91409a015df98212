package registry

import (
	"sync"
	"sync/atomic"
)

// Worker is the gateway's view of one upstream worker's load: the number of
// requests routed to it that have not finished yet. A request counts from
// the moment a policy selects the worker until its response (a whole stream
// included) has been written or aborted.
type Worker struct {
	addr      string
	inflight  atomic.Int64
	processed atomic.Uint64
}

// Addr returns the worker's dial address.
func (w *Worker) Addr() string { return w.addr }

// Load returns the worker's in-flight request count.
func (w *Worker) Load() int64 { return w.inflight.Load() }

// Processed returns how many requests were ever routed to the worker.
func (w *Worker) Processed() uint64 { return w.processed.Load() }

// TryAcquire reserves one request slot if the load is still seen, so that
// two concurrent selections cannot both take the same idle worker.
func (w *Worker) TryAcquire(seen int64) bool {
	if w.inflight.CompareAndSwap(seen, seen+1) {
		w.processed.Add(1)
		return true
	}
	return false
}

// Acquire counts one more in-flight request.
func (w *Worker) Acquire() {
	w.inflight.Add(1)
	w.processed.Add(1)
}

// Release ends a request counted by Acquire or TryAcquire. Callers go
// through a Lease, which makes it happen exactly once.
func (w *Worker) release() { w.inflight.Add(-1) }

// Lease is a request's hold on one worker's in-flight slot. The zero Lease
// holds nothing. Release is idempotent and safe to call concurrently, so the
// normal end of a request, an abort, a panic and a context callback may all
// race to release it and the counter still drops exactly once.
type Lease struct {
	w      atomic.Pointer[Worker]
	closed atomic.Bool
}

// Hold records that the request now holds w (already acquired). A previous
// hold is released first. Holding on a closed lease releases w at once, so a
// retry that races with the end of its request cannot leak a slot.
func (l *Lease) Hold(w *Worker) {
	if old := l.w.Swap(w); old != nil {
		old.release()
	}
	if l.closed.Load() {
		l.Release()
	}
}

// Close releases the slot and makes later Holds release immediately.
func (l *Lease) Close() {
	l.closed.Store(true)
	l.Release()
}

// Reopen makes a closed lease usable again (for pooled reuse).
func (l *Lease) Reopen() { l.closed.Store(false) }

// Worker returns the held worker, or nil.
func (l *Lease) Worker() *Worker { return l.w.Load() }

// Release gives the slot back, if one is held.
func (l *Lease) Release() {
	if old := l.w.Swap(nil); old != nil {
		old.release()
	}
}

type workerTable struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]*Worker]
}

func newWorkerTable() *workerTable {
	t := &workerTable{}
	m := map[string]*Worker{}
	t.m.Store(&m)
	return t
}

// WorkerFor returns the worker with the given dial address, creating it on
// first use. It does not allocate when the worker exists.
func WorkerFor(addr string) *Worker {
	if w, ok := (*workers.m.Load())[addr]; ok {
		return w
	}
	workers.mu.Lock()
	defer workers.mu.Unlock()
	old := *workers.m.Load()
	if w, ok := old[addr]; ok {
		return w
	}
	w := &Worker{addr: addr}
	next := make(map[string]*Worker, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[addr] = w
	workers.m.Store(&next)
	return w
}

// Workers calls fn for every known worker.
func Workers(fn func(*Worker)) {
	for _, w := range *workers.m.Load() {
		fn(w)
	}
}
