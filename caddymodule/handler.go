// Package caddymodule holds sglroute's Caddy glue: the sglroute HTTP
// handler, the Caddyfile directives and their order, and the registration of
// every sglroute module (importing the root package pulls this in).
package caddymodule

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
	"go.uber.org/zap"

	"github.com/sglroute/sglroute/internal/llmreq"
	"github.com/sglroute/sglroute/selection"
)

func init() {
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterHandlerDirective("sglroute", parseCaddyfile)
	// Before reverse_proxy (and sgl_pd, which will sit beside it), after
	// everything that rewrites or authenticates the request.
	httpcaddyfile.RegisterDirectiveOrder("sglroute", httpcaddyfile.Before, "reverse_proxy")
}

// Handler reads and parses each LLM request body once, before
// reverse_proxy, so that the sgl_* selection policies route on it without
// reading it again, and so that bad requests get a clear error instead of a
// worker's. On POST /generate, /v1/completions and /v1/chat/completions:
//
//   - a body over max_body_size is answered 413, malformed JSON 400, both
//     with an OpenAI-style JSON error body;
//   - otherwise the body is kept in memory, replayable for retries, and the
//     parse result travels in the request context to the policies;
//   - when the request ends (normally, on error, on client abort or panic)
//     the worker the policy chose is released exactly once.
//
// When no worker could serve such a request (reverse_proxy's 502, 503 or
// 504 before any response byte), the client gets the same JSON error shape
// with a generic message, and the detail goes to the log.
//
// Other requests pass through untouched.
type Handler struct {
	// MaxBodySize caps the request body in bytes. Default: 64 MiB.
	MaxBodySize int64 `json:"max_body_size,omitempty"`

	// OpenAIErrors answers gateway errors (no available worker, upstream
	// connection failure or timeout) on LLM endpoints in OpenAI's JSON
	// error shape. Set it to false to leave them to Caddy's handle_errors.
	// Default: true.
	OpenAIErrors *bool `json:"openai_errors,omitempty"`

	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.sglroute",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision sets defaults.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	if h.MaxBodySize == 0 {
		h.MaxBodySize = selection.DefaultMaxBodySize
	}
	if h.OpenAIErrors == nil {
		on := true
		h.OpenAIErrors = &on
	}
	return nil
}

// Validate checks the configuration.
func (h *Handler) Validate() error {
	if h.MaxBodySize < 0 {
		return fmt.Errorf("max_body_size must not be negative")
	}
	return nil
}

// ServeHTTP implements caddyhttp.MiddlewareHandler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if r.Method != http.MethodPost || llmreq.EndpointOf(r.URL.Path) == llmreq.EndpointOther ||
		selection.RequestFrom(r) != nil {
		return next.ServeHTTP(w, r)
	}
	st := selection.NewRequest()
	defer st.Finish()
	if err := st.ReadBody(r, h.MaxBodySize); err != nil {
		if errors.Is(err, selection.ErrBodyTooLarge) {
			h.logger.Debug("request body over the cap", zap.String("path", r.URL.Path), zap.Int64("max_body_size", h.MaxBodySize))
			llmreq.WriteError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
				fmt.Sprintf("request body exceeds the limit of %s", humanize.IBytes(uint64(h.MaxBodySize))))
			return nil
		}
		// The client went away or sent a broken body; nothing can be served.
		return caddyhttp.Error(http.StatusBadRequest, fmt.Errorf("reading request body: %w", err))
	}
	if st.ParseErr != nil {
		h.logger.Debug("malformed request body", zap.String("path", r.URL.Path), zap.Error(st.ParseErr))
		llmreq.WriteError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", st.ParseErr.Error())
		return nil
	}
	st.Attach(r)
	err := next.ServeHTTP(w, r)
	if err != nil && *h.OpenAIErrors {
		return h.answerGatewayError(w, r, err)
	}
	return err
}

// gatewayErrors maps reverse_proxy's error statuses to OpenAI-style codes
// and client-safe messages.
var gatewayErrors = map[int]struct{ code, msg string }{
	http.StatusBadGateway:         {"upstream_error", "the model worker could not be reached or failed to answer"},
	http.StatusServiceUnavailable: {"no_available_workers", "no model worker is available to serve this request"},
	http.StatusGatewayTimeout:     {"upstream_timeout", "the model worker did not answer in time"},
}

// answerGatewayError writes err as an OpenAI-style error if it is one of
// reverse_proxy's own failures; reverse_proxy returns an error only before
// it has written any part of a response.
func (h *Handler) answerGatewayError(w http.ResponseWriter, r *http.Request, err error) error {
	var he caddyhttp.HandlerError
	if !errors.As(err, &he) {
		return err
	}
	e, ok := gatewayErrors[he.StatusCode]
	if !ok {
		return err
	}
	h.logger.Error("no worker served the request",
		zap.String("path", r.URL.Path), zap.Int("status", he.StatusCode), zap.Error(he.Err))
	llmreq.WriteError(w, he.StatusCode, "server_error", e.code, e.msg)
	return nil
}

// parseCaddyfile parses the sglroute directive:
//
//	sglroute [<matcher>] {
//	    max_body_size <size>
//	    openai_errors on|off
//	}
func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(Handler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens; see
// parseCaddyfile for the syntax.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "max_body_size":
			if !d.NextArg() {
				return d.ArgErr()
			}
			v, err := humanize.ParseBytes(d.Val())
			if err != nil {
				return d.Errf("bad max_body_size %q: %v", d.Val(), err)
			}
			h.MaxBodySize = int64(v)
			if d.NextArg() {
				return d.ArgErr()
			}
		case "openai_errors":
			if !d.NextArg() {
				return d.ArgErr()
			}
			switch d.Val() {
			case "on":
				on := true
				h.OpenAIErrors = &on
			case "off":
				off := false
				h.OpenAIErrors = &off
			default:
				return d.Errf("openai_errors takes on or off, got %q", d.Val())
			}
			if d.NextArg() {
				return d.ArgErr()
			}
		default:
			return d.Errf("unrecognized sglroute option %q", d.Val())
		}
	}
	return nil
}

// Interface guards.
var (
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
