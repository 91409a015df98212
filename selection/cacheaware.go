package selection

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/dustin/go-humanize"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sglroute/sglroute/internal/registry"
	"github.com/sglroute/sglroute/tree"
)

func init() {
	caddy.RegisterModule(CacheAware{})
}

// Defaults follow the SGLang router's command line (not its struct
// defaults), so settings carry over from `sglang-router` flags.
const (
	DefaultCacheThreshold      = 0.3
	DefaultBalanceAbsThreshold = 64
	DefaultBalanceRelThreshold = 1.5
	DefaultEvictionInterval    = 120 * time.Second
	DefaultMaxTreeSize         = 1 << 26
)

// CacheAware routes each request to the worker most likely to hold its
// prompt prefix in KV cache, unless the fleet is out of balance. It keeps an
// approximate radix tree per (pool, model) of the text it routed to each
// worker:
//
//   - When the loads are imbalanced (max-min > balance_abs_threshold and
//     max > min*balance_rel_threshold) the least-loaded worker is chosen.
//   - Otherwise, if the longest prefix held by an available worker covers
//     more than cache_threshold of the request text, that worker is chosen.
//   - Otherwise the least-loaded worker is chosen.
//
// Among equally loaded workers the one with the smallest cache footprint in
// the tree wins, so cold prompts spread the working set evenly; remaining
// ties are broken at random. The text is then recorded in the tree under
// the chosen worker. Unavailable upstreams (Caddy health checks,
// max_requests) are skipped; a retry avoids the upstream that just failed.
//
// The request text comes from the sglroute handler when it ran before
// reverse_proxy; otherwise the policy reads the body itself (and restores
// it), which is enough for `reverse_proxy a b c { lb_policy sgl_cache_aware }`.
type CacheAware struct {
	// Pool names the routing state (trees) this policy shares with every
	// other sgl_* policy of the same pool name; it survives config reloads.
	// Default: "default".
	Pool string `json:"pool,omitempty"`

	// CacheThreshold is the minimum prefix match rate (matched characters
	// over request characters, strictly greater) for a cache-affine route.
	// Default: 0.3.
	CacheThreshold *float64 `json:"cache_threshold,omitempty"`

	// BalanceAbsThreshold is the absolute in-flight request gap between the
	// most and least loaded workers above which load wins over cache.
	// Default: 64.
	BalanceAbsThreshold *int64 `json:"balance_abs_threshold,omitempty"`

	// BalanceRelThreshold is the ratio of the most to the least loaded
	// worker's in-flight requests above which load wins over cache (both
	// thresholds must be exceeded). Default: 1.5.
	BalanceRelThreshold *float64 `json:"balance_rel_threshold,omitempty"`

	// EvictionInterval is how often the trees are trimmed to their size
	// budgets. 0 disables eviction. Default: 120s.
	EvictionInterval *caddy.Duration `json:"eviction_interval,omitempty"`

	// MaxTreeSize is each worker's character budget in a tree, as SGLang's
	// max_tree_size. 0 means no per-worker budget. Default: 67108864 (2^26).
	MaxTreeSize *int `json:"max_tree_size,omitempty"`

	// MaxTotalTreeSize is a character budget for the whole tree, shared by
	// all workers, so memory does not grow with fleet size. 0 (the default)
	// means no per-tree budget.
	MaxTotalTreeSize int `json:"max_total_tree_size,omitempty"`

	// MaxBodySize caps how many body bytes the policy reads when it has to
	// read the body itself. Default: 64 MiB.
	MaxBodySize int64 `json:"max_body_size,omitempty"`

	// Debug adds an X-Sglroute-Worker response header naming the chosen
	// upstream and why it was chosen.
	Debug bool `json:"debug,omitempty"`

	pool      *registry.Pool
	logger    *zap.Logger
	upstreams *upstreamResolver
}

// CaddyModule returns the Caddy module information.
func (CacheAware) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.sgl_cache_aware",
		New: func() caddy.Module { return new(CacheAware) },
	}
}

// Provision sets defaults and attaches the policy to its pool.
func (p *CacheAware) Provision(ctx caddy.Context) error {
	p.logger = ctx.Logger()
	if p.CacheThreshold == nil {
		v := DefaultCacheThreshold
		p.CacheThreshold = &v
	}
	if p.BalanceAbsThreshold == nil {
		v := int64(DefaultBalanceAbsThreshold)
		p.BalanceAbsThreshold = &v
	}
	if p.BalanceRelThreshold == nil {
		v := DefaultBalanceRelThreshold
		p.BalanceRelThreshold = &v
	}
	if p.EvictionInterval == nil {
		v := caddy.Duration(DefaultEvictionInterval)
		p.EvictionInterval = &v
	}
	if p.MaxTreeSize == nil {
		v := DefaultMaxTreeSize
		p.MaxTreeSize = &v
	}
	if p.MaxBodySize == 0 {
		p.MaxBodySize = DefaultMaxBodySize
	}
	if p.Pool == "" {
		p.Pool = registry.DefaultPool
	}
	p.upstreams = new(upstreamResolver)
	var kept bool
	p.pool, kept = registry.AcquirePool(p.Pool)
	p.pool.SetTreeOptions(tree.Options{MaxCharsPerTenant: *p.MaxTreeSize, MaxCharsTotal: p.MaxTotalTreeSize})
	if kept {
		p.logger.Info("routing state kept", zap.String("pool", p.Pool), zap.Int("trees", p.pool.TreeCount()))
	}
	if iv := time.Duration(*p.EvictionInterval); iv > 0 {
		go p.evictLoop(ctx, iv)
	}
	return nil
}

// Validate checks the option ranges.
func (p *CacheAware) Validate() error {
	switch {
	case *p.CacheThreshold < 0 || *p.CacheThreshold > 1:
		return fmt.Errorf("cache_threshold must be within [0, 1], got %v", *p.CacheThreshold)
	case *p.BalanceAbsThreshold < 0:
		return fmt.Errorf("balance_abs_threshold must not be negative, got %d", *p.BalanceAbsThreshold)
	case *p.BalanceRelThreshold < 1:
		return fmt.Errorf("balance_rel_threshold must be at least 1, got %v", *p.BalanceRelThreshold)
	case *p.EvictionInterval < 0:
		return fmt.Errorf("eviction_interval must not be negative")
	case *p.MaxTreeSize < 0 || p.MaxTotalTreeSize < 0:
		return fmt.Errorf("tree size budgets must not be negative")
	case p.MaxBodySize < 0:
		return fmt.Errorf("max_body_size must not be negative")
	}
	return nil
}

// Cleanup drops the policy's reference to its pool; the pool lives on while
// the next config uses it.
func (p *CacheAware) Cleanup() error {
	if p.pool != nil {
		registry.ReleasePool(p.Pool)
	}
	return nil
}

func (p *CacheAware) evictLoop(ctx caddy.Context, every time.Duration) {
	defer func() {
		if v := recover(); v != nil {
			p.logger.Error("tree eviction panicked", zap.Any("panic", v))
		}
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			start := time.Now()
			if n := p.pool.Evict(); n > 0 {
				p.logger.Info("evicted prefix tree entries",
					zap.String("pool", p.Pool), zap.Int("chars", n), zap.Duration("took", time.Since(start)))
			}
		}
	}
}

// Select implements reverseproxy.Selector.
func (p *CacheAware) Select(pool reverseproxy.UpstreamPool, r *http.Request, w http.ResponseWriter) *reverseproxy.Upstream {
	st := requestFor(r, p.MaxBodySize)
	var model, text []byte
	if st.ParseErr == nil {
		model, text = st.Parsed.Model, st.Parsed.Text
	}
	t := p.pool.Tree(model)
	cands := gather(st, pool, p.upstreams.infos(pool, t), t)
	if len(cands) == 0 {
		return nil
	}
	for i := range cands {
		cands[i].footprint = t.TenantChars(cands[i].tenant)
	}

	var chosen int
	var reason string
	st.path.Reset()
	minLoad, maxLoad := loadSpread(cands)
	if maxLoad-minLoad > *p.BalanceAbsThreshold && float64(maxLoad) > float64(minLoad)**p.BalanceRelThreshold {
		chosen, reason = takeLeastLoaded(cands), "imbalanced"
	} else {
		chosen = -1
		if len(text) > 0 {
			st.filter.set(cands)
			m := t.MatchPath(text, &st.filter, &st.path)
			st.filter.clear(cands)
			if m.Tenant != tree.NoTenant && m.InputChars > 0 &&
				float64(m.MatchedChars)/float64(m.InputChars) > *p.CacheThreshold {
				for i := range cands {
					if cands[i].tenant == m.Tenant {
						chosen, reason = i, "cache_hit"
						cands[i].w.Acquire()
						break
					}
				}
			}
		}
		if chosen < 0 {
			chosen, reason = takeLeastLoaded(cands), "cache_miss"
		}
	}

	c := cands[chosen]
	st.lease.Hold(c.w)
	if len(text) > 0 {
		t.InsertPath(text, c.tenant, &st.path)
	}
	if p.Debug {
		setDebugHeader(w, c.up, reason)
	}
	if ce := p.logger.Check(zapcore.DebugLevel, "selected worker"); ce != nil {
		ce.Write(zap.String("upstream", c.up.Dial), zap.String("reason", reason),
			zap.Int64("load", c.load), zap.Int("candidates", len(cands)))
	}
	return c.up
}

// UnmarshalCaddyfile sets up the policy from Caddyfile tokens. Syntax:
//
//	lb_policy sgl_cache_aware {
//	    pool                  <name>
//	    cache_threshold       <0..1>
//	    balance_abs_threshold <requests>
//	    balance_rel_threshold <ratio>
//	    eviction_interval     <duration>|off
//	    max_tree_size         <chars>
//	    max_total_tree_size   <chars>
//	    max_body_size         <size>
//	    debug
//	}
func (p *CacheAware) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // policy name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		opt := d.Val()
		if opt == "debug" {
			if d.NextArg() {
				return d.ArgErr()
			}
			p.Debug = true
			continue
		}
		if !d.NextArg() {
			return d.ArgErr()
		}
		val := d.Val()
		if d.NextArg() {
			return d.ArgErr()
		}
		var err error
		switch opt {
		case "pool":
			p.Pool = val
		case "cache_threshold":
			var v float64
			v, err = strconv.ParseFloat(val, 64)
			p.CacheThreshold = &v
		case "balance_abs_threshold":
			var v int64
			v, err = strconv.ParseInt(val, 10, 64)
			p.BalanceAbsThreshold = &v
		case "balance_rel_threshold":
			var v float64
			v, err = strconv.ParseFloat(val, 64)
			p.BalanceRelThreshold = &v
		case "eviction_interval":
			var v time.Duration
			if val != "off" {
				v, err = caddy.ParseDuration(val)
			}
			cd := caddy.Duration(v)
			p.EvictionInterval = &cd
		case "max_tree_size":
			var v int
			v, err = strconv.Atoi(val)
			p.MaxTreeSize = &v
		case "max_total_tree_size":
			p.MaxTotalTreeSize, err = strconv.Atoi(val)
		case "max_body_size":
			var v uint64
			v, err = humanize.ParseBytes(val)
			p.MaxBodySize = int64(v)
		default:
			return d.Errf("unrecognized sgl_cache_aware option %q", opt)
		}
		if err != nil {
			return d.Errf("bad %s value %q: %v", opt, val, err)
		}
	}
	return nil
}

// Interface guards.
var (
	_ reverseproxy.Selector = (*CacheAware)(nil)
	_ caddy.Provisioner     = (*CacheAware)(nil)
	_ caddy.Validator       = (*CacheAware)(nil)
	_ caddy.CleanerUpper    = (*CacheAware)(nil)
	_ caddyfile.Unmarshaler = (*CacheAware)(nil)
)
