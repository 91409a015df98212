package sim

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a simulated worker. Zero values get the defaults noted.
type Config struct {
	Name               string // worker id, sent in the X-SGLSim-Worker response header (default "sim")
	Model              string // served model name (default "sim-model")
	DPSize             int    // data-parallel ranks reported by /v1/loads and /server_info (default 1)
	DisaggregationMode string // "null" | "prefill" | "decode" (reported only; default "null")
	CharsPerToken      int    // pseudo-tokenizer: N ASCII chars per token (default 4)
	CacheTokens        int    // prefix-cache capacity in tokens, LRU (0 = no cache)

	PrefillPerToken time.Duration // prefill time per uncached prompt token
	DecodePerToken  time.Duration // decode time per output token
	MaxBatch        int           // max concurrently decoding requests (default 64)

	// Fault knobs (apply to the generation endpoints only).
	Latency        time.Duration // added before any work
	ErrorRate      float64       // probability of answering ErrorStatus (seeded RNG)
	ErrorStatus    int           // default 500
	FailFirstN     int           // the first N generation requests fail with ErrorStatus
	CrashMidStream bool          // abort the connection halfway through the output
	UnhealthyAfter time.Duration // health endpoints answer 503 this long after New (0 = never)
	Seed           int64

	// Logf, when set, receives one line per generation request.
	Logf func(format string, args ...any)
}

// Stats are cumulative counters of a worker (generation endpoints only).
type Stats struct {
	Requests         int64 // generation requests received (including failed ones)
	PromptTokens     int64 // prompt tokens prefilled
	CachedTokens     int64 // of which served from the prefix cache
	CompletionTokens int64 // output tokens produced
	Errors           int64 // generation requests answered with status >= 400 or aborted by a fault
	InFlight         int64 // generation requests currently being handled
	PeakInFlight     int64
	CacheSize        int64 // tokens currently in the prefix cache
}

// Worker is one simulated engine. Its Handler is safe for concurrent use.
type Worker struct {
	cfg   Config
	start time.Time
	cache *prefixCache

	prefillSem chan struct{} // one prefill at a time
	batchSem   chan struct{} // MaxBatch decoding slots

	unhealthy atomic.Bool

	requests, promptTokens, cachedTokens, completionTokens, errors atomic.Int64
	inFlight, peakInFlight                                         atomic.Int64
	seq                                                            atomic.Uint64
	rankRR                                                         atomic.Uint64

	ranks []rankState

	rngMu sync.Mutex
	rng   *rand.Rand

	tpMu sync.Mutex
	tp   [16]tpBucket
}

type rankState struct {
	running         atomic.Int64 // prefilling or decoding
	waiting         atomic.Int64 // queued for prefill or for a decode slot
	waitingUncached atomic.Int64
	waitingTokens   atomic.Int64
	runningTokens   atomic.Int64 // tokens held by running requests beyond the cache
}

type tpBucket struct {
	sec int64
	n   int64
}

// New creates a worker.
func New(cfg Config) *Worker {
	if cfg.Name == "" {
		cfg.Name = "sim"
	}
	if cfg.Model == "" {
		cfg.Model = "sim-model"
	}
	if cfg.DPSize <= 0 {
		cfg.DPSize = 1
	}
	if cfg.DisaggregationMode == "" {
		cfg.DisaggregationMode = "null"
	}
	if cfg.CharsPerToken <= 0 {
		cfg.CharsPerToken = 4
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 64
	}
	if cfg.ErrorStatus == 0 {
		cfg.ErrorStatus = 500
	}
	w := &Worker{
		cfg:        cfg,
		start:      time.Now(),
		prefillSem: make(chan struct{}, 1),
		batchSem:   make(chan struct{}, cfg.MaxBatch),
		ranks:      make([]rankState, cfg.DPSize),
		rng:        rand.New(rand.NewSource(cfg.Seed)),
	}
	if cfg.CacheTokens > 0 {
		w.cache = newPrefixCache(cfg.CacheTokens)
	}
	return w
}

// Config returns the effective configuration (defaults applied).
func (w *Worker) Config() Config { return w.cfg }

// Name returns the worker id.
func (w *Worker) Name() string { return w.cfg.Name }

// Stats returns a snapshot of the cumulative counters.
func (w *Worker) Stats() Stats {
	return Stats{
		Requests:         w.requests.Load(),
		PromptTokens:     w.promptTokens.Load(),
		CachedTokens:     w.cachedTokens.Load(),
		CompletionTokens: w.completionTokens.Load(),
		Errors:           w.errors.Load(),
		InFlight:         w.inFlight.Load(),
		PeakInFlight:     w.peakInFlight.Load(),
		CacheSize:        int64(w.cache.len()),
	}
}

// SetUnhealthy forces the health endpoints to answer 503 (true) or restores
// normal behaviour (false; UnhealthyAfter still applies).
func (w *Worker) SetUnhealthy(b bool) { w.unhealthy.Store(b) }

// Healthy reports what the health endpoints would answer.
func (w *Worker) Healthy() bool {
	if w.unhealthy.Load() {
		return false
	}
	if w.cfg.UnhealthyAfter > 0 && time.Since(w.start) >= w.cfg.UnhealthyAfter {
		return false
	}
	return true
}

// FlushCache empties the prefix cache.
func (w *Worker) FlushCache() { w.cache.flush() }

func (w *Worker) maxTotalTokens() int {
	if w.cfg.CacheTokens > 0 {
		return w.cfg.CacheTokens
	}
	return 1 << 20
}

func (w *Worker) enter() func() {
	n := w.inFlight.Add(1)
	for {
		p := w.peakInFlight.Load()
		if n <= p || w.peakInFlight.CompareAndSwap(p, n) {
			break
		}
	}
	return func() { w.inFlight.Add(-1) }
}

func (w *Worker) nextID() string {
	n := w.seq.Add(1)
	return fmt.Sprintf("%08x%08x%016x", tokenKey(w.cfg.Name)&0xffffffff, uint32(w.start.UnixNano()), n)
}

// injectFault decides whether this request fails. It returns 0 when not.
func (w *Worker) injectFault(n int64) int {
	if w.cfg.FailFirstN > 0 && n <= int64(w.cfg.FailFirstN) {
		return w.cfg.ErrorStatus
	}
	if w.cfg.ErrorRate > 0 {
		w.rngMu.Lock()
		f := w.rng.Float64()
		w.rngMu.Unlock()
		if f < w.cfg.ErrorRate {
			return w.cfg.ErrorStatus
		}
	}
	return 0
}

func (w *Worker) addThroughput(n int64) {
	sec := time.Now().Unix()
	w.tpMu.Lock()
	b := &w.tp[sec%int64(len(w.tp))]
	if b.sec != sec {
		b.sec, b.n = sec, 0
	}
	b.n += n
	w.tpMu.Unlock()
}

// genThroughput is output tokens/s over the last 5 complete seconds.
func (w *Worker) genThroughput() float64 {
	now := time.Now().Unix()
	var sum int64
	w.tpMu.Lock()
	for _, b := range w.tp {
		if b.sec < now && b.sec >= now-5 {
			sum += b.n
		}
	}
	w.tpMu.Unlock()
	return float64(sum) / 5
}

func (w *Worker) cacheHitRate() float64 {
	p := w.promptTokens.Load()
	if p == 0 {
		return 0
	}
	return float64(w.cachedTokens.Load()) / float64(p)
}

// sleepCtx sleeps for d, returning early with ctx.Err() when ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runResult describes a finished (or aborted) generation.
type runResult struct {
	promptTokens int
	cachedTokens int
	outputTokens int // produced so far
}

// run simulates one request: queue for and perform prefill, then queue for a
// decode slot and produce maxNew tokens. onPrefilled is called once the
// prefill is done (before the first token); emit is called after every output
// token when non-nil (streaming). Any callback error aborts the run.
func (w *Worker) run(ctx context.Context, seq tokenSeq, maxNew int,
	onPrefilled func(res *runResult) error, emit func(i int, res *runResult) error) (*runResult, error) {
	res := &runResult{promptTokens: len(seq.keys)}
	rank := &w.ranks[int(w.rankRR.Add(1)-1)%len(w.ranks)]

	// Queue for prefill.
	est := int64(len(seq.keys) - w.cache.peek(seq.keys))
	rank.waiting.Add(1)
	rank.waitingUncached.Add(est)
	rank.waitingTokens.Add(int64(len(seq.keys)))
	dequeued := false
	dequeue := func() {
		if !dequeued {
			dequeued = true
			rank.waiting.Add(-1)
			rank.waitingUncached.Add(-est)
			rank.waitingTokens.Add(-int64(len(seq.keys)))
		}
	}
	defer dequeue()
	select {
	case w.prefillSem <- struct{}{}:
	case <-ctx.Done():
		return res, ctx.Err()
	}
	dequeue()
	rank.running.Add(1)
	defer rank.running.Add(-1)

	// Prefill (serialised).
	cached := w.cache.peek(seq.keys)
	err := sleepCtx(ctx, time.Duration(len(seq.keys)-cached)*w.cfg.PrefillPerToken)
	if err == nil {
		cached = w.cache.matchInsert(seq.keys)
	}
	<-w.prefillSem
	if err != nil {
		return res, err
	}
	res.cachedTokens = cached
	w.promptTokens.Add(int64(len(seq.keys)))
	w.cachedTokens.Add(int64(cached))
	if w.cache == nil {
		rank.runningTokens.Add(int64(len(seq.keys)))
		defer rank.runningTokens.Add(-int64(len(seq.keys)))
	}

	// Decode slot.
	select {
	case w.batchSem <- struct{}{}:
	default:
		rank.running.Add(-1)
		rank.waiting.Add(1)
		select {
		case w.batchSem <- struct{}{}:
		case <-ctx.Done():
			rank.waiting.Add(-1)
			rank.running.Add(1)
			return res, ctx.Err()
		}
		rank.waiting.Add(-1)
		rank.running.Add(1)
	}
	defer func() { <-w.batchSem }()
	defer func() { rank.runningTokens.Add(-int64(res.outputTokens)) }()

	if onPrefilled != nil {
		if err := onPrefilled(res); err != nil {
			return res, err
		}
	}
	d := w.cfg.DecodePerToken
	if emit == nil {
		if err := sleepCtx(ctx, time.Duration(maxNew)*d); err != nil {
			return res, err
		}
		res.outputTokens = maxNew
		rank.runningTokens.Add(int64(maxNew))
		w.completionTokens.Add(int64(maxNew))
		w.addThroughput(int64(maxNew))
		return res, nil
	}
	begin := time.Now()
	for i := 0; i < maxNew; i++ {
		if d > 0 {
			if err := sleepCtx(ctx, time.Until(begin.Add(time.Duration(i+1)*d))); err != nil {
				return res, err
			}
		} else if err := ctx.Err(); err != nil {
			return res, err
		}
		res.outputTokens++
		rank.runningTokens.Add(1)
		w.completionTokens.Add(1)
		w.addThroughput(1)
		if err := emit(i, res); err != nil {
			return res, err
		}
	}
	return res, nil
}
