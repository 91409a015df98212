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

// gather starts an attempt: it releases the previous attempt's worker,
// marks it tried, and fills st.cands with the available upstreams, leaving
// out tried ones unless nothing else is available. tenantOf, if not nil,
// maps an upstream to its tree tenant.
func gather(st *Request, pool reverseproxy.UpstreamPool, tenantOf func(string) tree.TenantID) []candidate {
	if prev := st.lease.Worker(); prev != nil {
		st.noteTried(prev.Addr())
		st.lease.Release()
	}
	cands := st.cands[:0]
	skipped := false
	for _, up := range pool {
		if !up.Available() {
			continue
		}
		if st.ntried > 0 && st.wasTried(up.Dial) {
			skipped = true
			continue
		}
		cands = appendCandidate(cands, up, tenantOf)
	}
	if len(cands) == 0 && skipped {
		for _, up := range pool {
			if up.Available() {
				cands = appendCandidate(cands, up, tenantOf)
			}
		}
	}
	st.cands = cands
	return cands
}

func appendCandidate(cands []candidate, up *reverseproxy.Upstream, tenantOf func(string) tree.TenantID) []candidate {
	w := registry.WorkerFor(up.Dial)
	c := candidate{up: up, w: w, tenant: tree.NoTenant, load: w.Load()}
	if tenantOf != nil {
		c.tenant = tenantOf(up.Dial)
	}
	return append(cands, c)
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
	const attempts = 8
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
