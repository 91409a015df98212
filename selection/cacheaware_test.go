package selection

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/sglroute/sglroute/internal/registry"
)

// upstreams returns n healthy upstreams with addresses unique to the test,
// because worker loads live in a process-wide registry.
func upstreams(t *testing.T, n int) reverseproxy.UpstreamPool {
	pool := make(reverseproxy.UpstreamPool, n)
	for i := range pool {
		pool[i] = &reverseproxy.Upstream{Dial: fmt.Sprintf("%s-w%d:1", t.Name(), i), Host: new(reverseproxy.Host)}
	}
	return pool
}

func provision(t *testing.T, p *CacheAware) *CacheAware {
	t.Helper()
	if p.Pool == "" {
		p.Pool = t.Name()
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(func() { _ = p.Cleanup(); cancel() })
	if err := p.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	p.logger = zap.NewNop() // Caddy's default logger is at debug level outside a config
	return p
}

// chatRequest builds a request as Caddy hands it to Select: with a vars map
// in its context, so the policy can keep its per-request state.
func chatRequest(system, user string) *http.Request {
	body, _ := json.Marshal(map[string]any{
		"model": "m",
		"messages": []map[string]string{
			{"role": "system", "content": system},
			{"role": "user", "content": user},
		},
	})
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(string(body)))
	ctx := context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{})
	return r.WithContext(ctx)
}

// finish ends a request the way the sglroute handler's defer does.
func finish(r *http.Request) {
	if st := RequestFrom(r); st != nil {
		st.lease.Close()
	}
}

func loads(pool reverseproxy.UpstreamPool) []int64 {
	out := make([]int64, len(pool))
	for i, up := range pool {
		out[i] = registry.WorkerFor(up.Dial).Load()
	}
	return out
}

func system(group int) string {
	return strings.Repeat(fmt.Sprintf("System prompt of group %d. ", group), 40)
}

func TestCacheAwareKeepsPrefixAffinity(t *testing.T) {
	p := provision(t, &CacheAware{})
	pool := upstreams(t, 4)
	first := map[int]string{}
	for round := 0; round < 5; round++ {
		for g := 0; g < 8; g++ {
			r := chatRequest(system(g), fmt.Sprintf("question %d", round))
			up := p.Select(pool, r, httptest.NewRecorder())
			if up == nil {
				t.Fatal("no upstream selected")
			}
			if round == 0 {
				first[g] = up.Dial
			} else if up.Dial != first[g] {
				t.Errorf("group %d round %d went to %s, first went to %s", g, round, up.Dial, first[g])
			}
			finish(r)
		}
	}
	used := map[string]bool{}
	for _, d := range first {
		used[d] = true
	}
	if len(used) < 3 {
		t.Errorf("8 cold groups on 4 idle workers used only %d workers (ties must be broken at random)", len(used))
	}
	for i, l := range loads(pool) {
		if l != 0 {
			t.Errorf("worker %d load %d after all requests finished", i, l)
		}
	}
}

func TestCacheAwareReservesAtSelect(t *testing.T) {
	p := provision(t, &CacheAware{})
	pool := upstreams(t, 8)
	var wg sync.WaitGroup
	chosen := make([]string, len(pool))
	reqs := make([]*http.Request, len(pool))
	for i := range pool {
		reqs[i] = chatRequest(system(100+i), "q")
	}
	start := make(chan struct{})
	for i := range pool {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			chosen[i] = p.Select(pool, reqs[i], nil).Dial
		}(i)
	}
	close(start)
	wg.Wait()
	seen := map[string]int{}
	for i, d := range chosen {
		if j, dup := seen[d]; dup {
			t.Errorf("concurrent cold requests %d and %d both took idle worker %s", j, i, d)
		}
		seen[d] = i
	}
	for i, l := range loads(pool) {
		if l != 1 {
			t.Errorf("worker %d load = %d while one request is in flight, want 1", i, l)
		}
	}
	for _, r := range reqs {
		finish(r)
	}
	for i, l := range loads(pool) {
		if l != 0 {
			t.Errorf("worker %d load = %d after release, want 0", i, l)
		}
	}
}

func TestCacheAwareImbalanceOverridesCache(t *testing.T) {
	abs, rel := int64(2), 1.5
	p := provision(t, &CacheAware{BalanceAbsThreshold: &abs, BalanceRelThreshold: &rel})
	pool := upstreams(t, 2)
	r := chatRequest(system(1), "q")
	home := p.Select(pool, r, nil)
	finish(r)

	// Pile 5 in-flight requests on the worker that holds the prefix.
	hold := registry.WorkerFor(home.Dial)
	for i := 0; i < 5; i++ {
		hold.Acquire()
	}
	defer func() {
		for i := 0; i < 5; i++ {
			var l registry.Lease
			l.Hold(hold)
			l.Release()
		}
	}()
	r = chatRequest(system(1), "q")
	if got := p.Select(pool, r, nil); got == home {
		t.Errorf("imbalanced fleet (5 vs 0 in flight): request still went to the cache holder %s", got.Dial)
	}
	finish(r)
}

func TestCacheAwareThresholdIsStrict(t *testing.T) {
	// A request that matches exactly half of its characters must not count
	// as a hit at cache_threshold 0.5; one character more must.
	half := 0.5
	p := provision(t, &CacheAware{CacheThreshold: &half, Debug: true})
	pool := upstreams(t, 2)
	prefix := strings.Repeat("a", 100)
	reason := func(s string) string {
		r := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(`{"prompt":"`+s+`"}`))
		r = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{}))
		w := httptest.NewRecorder()
		p.Select(pool, r, w)
		finish(r)
		h := w.Header().Get(debugHeader)
		return h[strings.Index(h, "; ")+2:]
	}
	if got := reason(prefix); got != "cache_miss" {
		t.Fatalf("first request: %s", got)
	}
	if got := reason(prefix + strings.Repeat("b", 100)); got != "cache_miss" {
		t.Errorf("match rate exactly 0.5 at cache_threshold 0.5: %s, want cache_miss", got)
	}
	if got := reason(prefix + strings.Repeat("c", 99)); got != "cache_hit" {
		t.Errorf("match rate 100/199 at cache_threshold 0.5: %s, want cache_hit", got)
	}
}

func TestCacheAwareRetryAvoidsFailedUpstream(t *testing.T) {
	p := provision(t, &CacheAware{})
	pool := upstreams(t, 3)
	r := chatRequest(system(7), "q")
	first := p.Select(pool, r, nil)
	finish(r)

	// The same prompt again: a cache hit on `first`; then Caddy retries
	// (calls Select again on the same request) after that attempt failed.
	r = chatRequest(system(7), "q")
	if got := p.Select(pool, r, nil); got != first {
		t.Fatalf("warm prompt went to %s, want %s", got.Dial, first.Dial)
	}
	retry := p.Select(pool, r, nil)
	if retry == first {
		t.Fatalf("retry picked the upstream that just failed (%s) while others are available", first.Dial)
	}
	if l := registry.WorkerFor(first.Dial).Load(); l != 0 {
		t.Errorf("failed attempt's worker still counts %d in-flight", l)
	}
	if l := registry.WorkerFor(retry.Dial).Load(); l != 1 {
		t.Errorf("retry's worker counts %d in-flight, want 1", l)
	}
	// Body must be replayable for the retry.
	b, err := io.ReadAll(r.Body)
	if err != nil || !strings.Contains(string(b), "System prompt of group 7") {
		t.Errorf("body after two Selects = %q, %v; want the original body", b, err)
	}
	finish(r)
}

func TestCacheAwareOnlyTriedUpstreamsLeft(t *testing.T) {
	p := provision(t, &CacheAware{})
	pool := upstreams(t, 1)
	r := chatRequest(system(3), "q")
	a := p.Select(pool, r, nil)
	b := p.Select(pool, r, nil)
	if a != pool[0] || b != pool[0] {
		t.Fatalf("with a single upstream a retry must reuse it; got %v then %v", a, b)
	}
	finish(r)
	if l := registry.WorkerFor(pool[0].Dial).Load(); l != 0 {
		t.Errorf("load %d after retry and finish, want 0", l)
	}
}

func TestCacheAwareRestoresBodyWithoutHandler(t *testing.T) {
	p := provision(t, &CacheAware{})
	pool := upstreams(t, 2)
	r := chatRequest(system(9), "tell me")
	want := `"tell me"`
	p.Select(pool, r, nil)
	b, _ := io.ReadAll(r.Body)
	if !strings.Contains(string(b), want) {
		t.Fatalf("upstream would get %q", b)
	}
	finish(r)
}

func TestCacheAwareEmptyPool(t *testing.T) {
	p := provision(t, &CacheAware{})
	r := chatRequest("s", "q")
	if up := p.Select(nil, r, nil); up != nil {
		t.Fatalf("Select on an empty pool = %v, want nil", up)
	}
	finish(r)
}

func TestCacheAwareContextEndReleasesWithoutHandler(t *testing.T) {
	p := provision(t, &CacheAware{})
	pool := upstreams(t, 1)
	r := chatRequest("s", "q")
	ctx, cancel := context.WithCancel(r.Context())
	r = r.WithContext(ctx)
	p.Select(pool, r, nil)
	if l := registry.WorkerFor(pool[0].Dial).Load(); l != 1 {
		t.Fatalf("load %d during request, want 1", l)
	}
	done := make(chan struct{})
	context.AfterFunc(ctx, func() { close(done) })
	cancel() // net/http cancels the context when the handler chain returns
	<-done
	// AfterFuncs run in their own goroutines; wait for ours by holding a
	// second lease through the same path until the count settles.
	for i := 0; registry.WorkerFor(pool[0].Dial).Load() != 0; i++ {
		if i > 1e7 {
			t.Fatal("request context ended but the worker stayed loaded")
		}
		runtimeGosched()
	}
}

func TestCacheAwareSelectHitAllocatesNothing(t *testing.T) {
	p := provision(t, &CacheAware{})
	pool := upstreams(t, 4)
	r := chatRequest(system(11), "same question")
	st := NewRequest()
	if err := st.ReadBody(r, DefaultMaxBodySize); err != nil || st.ParseErr != nil {
		t.Fatal(err, st.ParseErr)
	}
	st.Attach(r)
	p.Select(pool, r, nil)
	allocs := testing.AllocsPerRun(200, func() {
		st.lease.Release()
		st.ntried = 0
		p.Select(pool, r, nil)
	})
	if allocs != 0 {
		t.Errorf("Select on a cache hit allocates %.1f times per call, want 0", allocs)
	}
	st.Finish()
}

func TestCacheAwareCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`sgl_cache_aware {
		pool chat
		cache_threshold 0.5
		balance_abs_threshold 32
		balance_rel_threshold 1.1
		eviction_interval 30s
		max_tree_size 10000
		max_total_tree_size 5000000
		max_body_size 1MiB
		debug
	}`)
	var p CacheAware
	if err := p.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(p)
	want := `{"pool":"chat","cache_threshold":0.5,"balance_abs_threshold":32,"balance_rel_threshold":1.1,"eviction_interval":30000000000,"max_tree_size":10000,"max_total_tree_size":5000000,"max_body_size":1048576,"debug":true}`
	if string(got) != want {
		t.Errorf("JSON = %s\nwant   %s", got, want)
	}

	for _, bad := range []string{
		"sgl_cache_aware extra",
		"sgl_cache_aware {\n bogus 1\n}",
		"sgl_cache_aware {\n cache_threshold\n}",
		"sgl_cache_aware {\n cache_threshold x\n}",
		"sgl_cache_aware {\n cache_threshold 0.1 0.2\n}",
		"sgl_cache_aware {\n max_body_size lots\n}",
	} {
		var p CacheAware
		if err := p.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}

	var off CacheAware
	if err := off.UnmarshalCaddyfile(caddyfile.NewTestDispenser("sgl_cache_aware {\n eviction_interval off\n}")); err != nil || off.EvictionInterval == nil || *off.EvictionInterval != 0 {
		t.Errorf("eviction_interval off: %v %v", err, off.EvictionInterval)
	}
}

func TestCacheAwareValidate(t *testing.T) {
	neg, big, low := -0.1, 1.5, 0.5
	for _, p := range []*CacheAware{
		{CacheThreshold: &neg},
		{CacheThreshold: &big},
		{BalanceRelThreshold: &low},
	} {
		p.Pool = t.Name()
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		if err := p.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Validate(); err == nil {
			t.Errorf("Validate accepted %+v", p)
		}
		_ = p.Cleanup()
		cancel()
	}
}

func TestCacheAwareEvictsToBudget(t *testing.T) {
	every := caddy.Duration(time.Millisecond)
	budget := 300
	p := provision(t, &CacheAware{EvictionInterval: &every, MaxTreeSize: &budget})
	pool := upstreams(t, 2)
	for g := 0; g < 20; g++ {
		r := chatRequest(system(g), "q")
		p.Select(pool, r, nil)
		finish(r)
	}
	tr := p.pool.Tree([]byte("m"))
	over := func() bool {
		for _, up := range pool {
			id, _ := tr.LookupTenant(up.Dial)
			if tr.TenantChars(id) > budget {
				return true
			}
		}
		return false
	}
	deadline := time.After(30 * time.Second)
	for over() {
		select {
		case <-deadline:
			t.Fatalf("tree still over max_tree_size %d after 30s of 1ms eviction ticks", budget)
		case <-time.After(time.Millisecond):
		}
	}
}

func TestCacheAwareAlternatingModelsAllocateNothing(t *testing.T) {
	p := provision(t, &CacheAware{})
	pool := upstreams(t, 4)
	mk := func(model string) (*http.Request, *Request) {
		r := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(`{"model":"`+model+`","prompt":"a shared prompt"}`))
		r = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{}))
		st := NewRequest()
		if err := st.ReadBody(r, DefaultMaxBodySize); err != nil || st.ParseErr != nil {
			t.Fatal(err, st.ParseErr)
		}
		st.Attach(r)
		return r, st
	}
	ra, sa := mk("model-a")
	rb, sb := mk("model-b")
	for i := 0; i < 3; i++ { // warm both trees and their upstream caches
		for _, x := range []struct {
			r  *http.Request
			st *Request
		}{{ra, sa}, {rb, sb}} {
			x.st.lease.Release()
			x.st.ntried = 0
			p.Select(pool, x.r, nil)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		sa.lease.Release()
		sa.ntried = 0
		p.Select(pool, ra, nil)
		sb.lease.Release()
		sb.ntried = 0
		p.Select(pool, rb, nil)
	})
	if allocs != 0 {
		t.Errorf("alternating models: %.1f allocations per pair of Selects, want 0", allocs)
	}
	sa.Finish()
	sb.Finish()
}
