package selection

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sglroute/sglroute/internal/llmreq"
	"github.com/sglroute/sglroute/internal/registry"
	"github.com/sglroute/sglroute/tree"
)

// VarKey is the caddyhttp variable under which a request's *Request travels
// from the sglroute handler to the selection policies.
const VarKey = "sglroute.request"

// DefaultMaxBodySize caps how much of a request body is read for routing.
const DefaultMaxBodySize = 64 << 20

// maxTried bounds how many failed upstreams a request remembers for retries.
const maxTried = 8

// ErrBodyTooLarge is returned by ReadBody when the body exceeds the cap.
var ErrBodyTooLarge = errors.New("request body too large")

// Request is the routing state of one client request: the body, read once
// and parsed once, the lease on the worker currently serving it, and the
// workers already tried. The sglroute handler creates it before
// reverse_proxy runs; a policy creates it itself when the handler is absent.
// Its scratch space makes Select allocation-free.
type Request struct {
	// Parsed is the parse result. Valid only when ParseErr is nil.
	Parsed llmreq.Request
	// ParseErr is the parse error, if the body was not valid for its endpoint.
	ParseErr error

	body *replayBody // the current attempt's body
	bufp *[]byte
	// openBodies counts the bodies handed to upstream transports that have
	// not been closed yet; the buffer is recycled only when it is 0.
	openBodies atomic.Int32
	lease      registry.Lease

	tried  [maxTried]string
	ntried int

	cands  []candidate
	filter candidateFilter
	path   tree.Path // the last match's walk, so the insert need not repeat it
}

var requestPool = sync.Pool{New: func() any { return new(Request) }}
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// NewRequest returns an empty Request from a pool; Finish returns it.
func NewRequest() *Request { return requestPool.Get().(*Request) }

// RequestFrom returns the Request attached to r, or nil.
func RequestFrom(r *http.Request) *Request {
	st, _ := caddyhttp.GetVar(r.Context(), VarKey).(*Request)
	return st
}

// Attach stores st in r's vars and makes r's body replay st's body.
func (st *Request) Attach(r *http.Request) {
	caddyhttp.SetVar(r.Context(), VarKey, st)
	r.Body = st.newBody()
	r.ContentLength = int64(len(st.bodyBytes()))
	r.TransferEncoding = nil
	r.GetBody = nil
}

// newBody returns a fresh reader over the request body for one attempt.
// Each attempt gets its own, as Caddy's request_buffers does: a failed
// attempt's transport may still be reading its reader when the retry starts.
func (st *Request) newBody() *replayBody {
	b := &replayBody{open: &st.openBodies}
	b.r.Reset(st.bodyBytes())
	st.openBodies.Add(1)
	st.body = b
	return b
}

func (st *Request) bodyBytes() []byte {
	if st.bufp == nil {
		return nil
	}
	return *st.bufp
}

// Lease returns the request's hold on its current worker.
func (st *Request) Lease() *registry.Lease { return &st.lease }

// ReadBody reads r's body, up to max bytes, into a pooled buffer and parses
// it for the endpoint of r's path. It returns ErrBodyTooLarge over the cap
// and other errors from reading; a parse error is kept in ParseErr.
func (st *Request) ReadBody(r *http.Request, max int64) error {
	return st.readBody(r, max, bodyPool.Get().(*[]byte))
}

// readBody reads into *bp, which becomes the request's body buffer.
func (st *Request) readBody(r *http.Request, max int64, bp *[]byte) error {
	buf := (*bp)[:0]
	var err error
	if r.Body != nil && r.Body != http.NoBody {
		buf, err = readCapped(r.Body, buf, max)
	}
	*bp = buf
	st.bufp = bp
	if err != nil {
		return err
	}
	ep := llmreq.EndpointOf(r.URL.Path)
	st.ParseErr = llmreq.Parse(ep, buf, &st.Parsed)
	return nil
}

func readCapped(rd io.Reader, buf []byte, max int64) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > max {
			return buf, ErrBodyTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// Finish releases the request's worker and returns its buffers to their
// pools. Call it once, after the response has been written; st must not be
// used afterwards.
func (st *Request) Finish() {
	st.lease.Close()
	// Go's transport may go on writing a request body after RoundTrip
	// returned (when the upstream answered early) and closes it when done.
	// While any body is still open, neither its bytes nor st (which its
	// Close touches) may be reused: leave them to the garbage collector.
	if st.openBodies.Load() != 0 {
		return
	}
	if st.bufp != nil && cap(*st.bufp) <= 1<<20 {
		*st.bufp = (*st.bufp)[:0]
		bodyPool.Put(st.bufp)
	}
	st.bufp = nil
	st.body = nil
	st.Parsed.Reset()
	st.ParseErr = nil
	st.ntried = 0
	st.cands = st.cands[:0]
	st.lease.Reopen()
	requestPool.Put(st)
}

// requestFor returns r's Request, creating one when no sglroute handler ran:
// the policy then reads and restores the body itself, and the lease is
// released when the request's context ends (net/http cancels it when the
// handler chain returns, so a whole stream is counted).
func requestFor(r *http.Request, maxBody int64) *Request {
	if st := RequestFrom(r); st != nil {
		if st.body != nil && st.lease.Worker() != nil {
			// A retry: the previous attempt consumed its body.
			r.Body = st.newBody()
		}
		return st
	}
	// Neither st nor its buffer is pooled: the context may end (client gone)
	// while a retry or the transport still uses them.
	st := &Request{}
	var buf []byte
	if r.ContentLength > 0 && r.ContentLength <= maxBody {
		buf = make([]byte, 0, r.ContentLength+1) // +1: room to see EOF without growing
	}
	if err := st.readBody(r, maxBody, &buf); err != nil {
		// The body cannot be routed on and may be partly consumed; restore
		// what was read followed by the rest so the upstream sees it whole.
		rest := r.Body
		st.ParseErr = err
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(st.bodyBytes()), rest), rest}
		caddyhttp.SetVar(r.Context(), VarKey, st)
	} else {
		st.Attach(r)
	}
	context.AfterFunc(r.Context(), st.lease.Close)
	return st
}

// noteTried records that the request's previous attempt went to addr.
func (st *Request) noteTried(addr string) {
	for i := 0; i < st.ntried; i++ {
		if st.tried[i] == addr {
			return
		}
	}
	if st.ntried < maxTried {
		st.tried[st.ntried] = addr
		st.ntried++
	}
}

func (st *Request) wasTried(addr string) bool {
	for i := 0; i < st.ntried; i++ {
		if st.tried[i] == addr {
			return true
		}
	}
	return false
}

// replayBody is one attempt's reader over a request body. The bytes belong
// to the Request; Close only reports that the transport is done with them.
type replayBody struct {
	r      bytes.Reader
	open   *atomic.Int32
	closed atomic.Bool
}

func (b *replayBody) Read(p []byte) (int, error)         { return b.r.Read(p) }
func (b *replayBody) WriteTo(w io.Writer) (int64, error) { return b.r.WriteTo(w) }

func (b *replayBody) Close() error {
	if b.closed.CompareAndSwap(false, true) {
		b.open.Add(-1)
	}
	return nil
}

// candidateFilter tells the tree which tenants may be chosen now: a bitset
// over the tree's dense tenant IDs, so the check is O(1) whatever the fleet
// size.
type candidateFilter struct{ bits []uint64 }

func (f *candidateFilter) set(cands []candidate) {
	for _, c := range cands {
		if c.tenant < 0 {
			continue
		}
		w := int(c.tenant) >> 6
		for len(f.bits) <= w {
			f.bits = append(f.bits, 0)
		}
		f.bits[w] |= 1 << (uint(c.tenant) & 63)
	}
}

func (f *candidateFilter) clear(cands []candidate) {
	for _, c := range cands {
		if c.tenant >= 0 {
			f.bits[int(c.tenant)>>6] = 0
		}
	}
}

func (f *candidateFilter) Eligible(id tree.TenantID) bool {
	w := int(id) >> 6
	return id >= 0 && w < len(f.bits) && f.bits[w]&(1<<(uint(id)&63)) != 0
}
