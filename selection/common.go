// Package selection holds sglroute's reverse_proxy selection policies
// (http.reverse_proxy.selection_policies.sgl_*) and the per-request routing
// state they share with the sglroute handler.
//
// Every policy counts load the same way: Select reserves a slot on the
// chosen worker's in-flight counter (registry.Worker) and the request's
// Lease releases it exactly once when the request ends, whatever way it
// ends. A retry calls Select again; the previous attempt's slot is released
// and its upstream is avoided while another is available.
package selection

import (
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/sglroute/sglroute/internal/registry"
	"github.com/sglroute/sglroute/tree"
)

// candidate is an upstream that may be chosen for this attempt.
type candidate struct {
	up     *reverseproxy.Upstream
	w      *registry.Worker
	tenant tree.TenantID
	load   int64
	// footprint is the size of the cache the router believes the worker
	// holds (0 when the policy keeps no tree). Among equally loaded
	// workers the smaller footprint wins: a cold prompt goes where it
	// evicts least, which partitions the working set evenly.
	footprint int
}

// upstreamInfo is what a policy needs to know of an upstream beyond Caddy's
// view of it: its load counter and its tenant in the policy's tree.
type upstreamInfo struct {
	dial   string
	w      *registry.Worker
	tenant tree.TenantID
}

// upstreamCache remembers the upstreamInfo of a static upstream pool, which
// reverse_proxy passes as the same immutable slice on every request, so
// that Select does no string-keyed lookups per upstream.
type upstreamCache struct {
	first *reverseproxy.Upstream
	infos []upstreamInfo
}

// upstreamResolver holds a policy instance's upstreamCache per tree (tenant
// IDs are per tree, and a pool has one tree per model).
type upstreamResolver struct {
	mu       sync.Mutex // serialises copy-on-write of caches
	caches   atomic.Pointer[map[*tree.Tree]*upstreamCache]
	lastMiss atomic.Pointer[reverseproxy.Upstream]
}

// infos resolves pool against the cache, filling it when the same pool is
// seen twice in a row (dynamic upstream sources hand out fresh upstreams on
// every call and so never fill it). It returns nil when the caller must
// resolve upstreams one by one.
func (r *upstreamResolver) infos(pool reverseproxy.UpstreamPool, t *tree.Tree) []upstreamInfo {
	if len(pool) == 0 {
		return nil
	}
	var uc *upstreamCache
	if m := r.caches.Load(); m != nil {
		uc = (*m)[t]
	}
	if uc != nil && uc.first == pool[0] && len(uc.infos) == len(pool) {
		ok := true
		for i, up := range pool {
			// Same strings compare by pointer in O(1).
			if uc.infos[i].dial != up.Dial {
				ok = false
				break
			}
		}
		if ok {
			return uc.infos
		}
	}
	if r.lastMiss.Swap(pool[0]) != pool[0] {
		return nil
	}
	infos := make([]upstreamInfo, len(pool))
	for i, up := range pool {
		infos[i] = resolve(up, t)
	}
	r.mu.Lock()
	next := map[*tree.Tree]*upstreamCache{}
	if m := r.caches.Load(); m != nil {
		for k, v := range *m {
			next[k] = v
		}
	}
	next[t] = &upstreamCache{first: pool[0], infos: infos}
	r.caches.Store(&next)
	r.mu.Unlock()
	return infos
}

func resolve(up *reverseproxy.Upstream, t *tree.Tree) upstreamInfo {
	info := upstreamInfo{dial: up.Dial, w: registry.WorkerFor(up.Dial), tenant: tree.NoTenant}
	if t != nil {
		info.tenant = t.Tenant(up.Dial)
	}
	return info
}

// gather starts an attempt: it releases the previous attempt's worker,
// marks it tried, and fills st.cands with the available upstreams, leaving
// out tried ones unless nothing else is available. infos, if not nil, is
// parallel to pool; otherwise upstreams are resolved against t.
func gather(st *Request, pool reverseproxy.UpstreamPool, infos []upstreamInfo, t *tree.Tree) []candidate {
	if prev := st.lease.Worker(); prev != nil {
		st.noteTried(prev.Addr())
		st.lease.Release()
	}
	cands := st.cands[:0]
	skipped := false
	for pass := 0; pass < 2; pass++ {
		for i, up := range pool {
			if !up.Available() {
				continue
			}
			if pass == 0 && st.ntried > 0 && st.wasTried(up.Dial) {
				skipped = true
				continue
			}
			var info upstreamInfo
			if infos != nil {
				info = infos[i]
			} else {
				info = resolve(up, t)
			}
			cands = append(cands, candidate{up: up, w: info.w, tenant: info.tenant, load: info.w.Load()})
		}
		if len(cands) > 0 || !skipped {
			break
		}
	}
	st.cands = cands
	return cands
}

// loadSpread returns the minimum and maximum load over the candidates.
func loadSpread(cands []candidate) (min, max int64) {
	min, max = cands[0].load, cands[0].load
	for _, c := range cands[1:] {
		if c.load < min {
			min = c.load
		}
		if c.load > max {
			max = c.load
		}
	}
	return min, max
}

// takeLeastLoaded reserves and returns the least-loaded candidate, breaking
// ties by the smaller footprint, then uniformly at random. The reservation is a compare-and-swap on the
// load it saw, so concurrent requests cannot pile onto one idle worker: the
// loser re-reads the loads and picks again.
func takeLeastLoaded(cands []candidate) int {
	// A lost race means another request took a slot, so a request loses at
	// most once per concurrent competitor; past this bound (extreme
	// contention) it settles for a plain increment.
	attempts := 2*len(cands) + 8
	best := 0
	for try := 0; try < attempts; try++ {
		best = -1
		var bestLoad int64
		var bestFoot, ties int
		for i := range cands {
			l, f := cands[i].w.Load(), cands[i].footprint
			cands[i].load = l
			switch {
			case best < 0 || l < bestLoad || (l == bestLoad && f < bestFoot):
				best, bestLoad, bestFoot, ties = i, l, f, 1
			case l == bestLoad && f == bestFoot:
				ties++
				if rand.IntN(ties) == 0 {
					best = i
				}
			}
		}
		if cands[best].w.TryAcquire(bestLoad) {
			return best
		}
	}
	cands[best].w.Acquire()
	return best
}

// debugHeader names the chosen worker and the reason in the response, for
// operators checking routing by hand.
const debugHeader = "X-Sglroute-Worker"

func setDebugHeader(w http.ResponseWriter, up *reverseproxy.Upstream, reason string) {
	if w != nil {
		w.Header().Set(debugHeader, up.Dial+"; "+reason)
	}
}
