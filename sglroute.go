// Package sglroute makes Caddy the front door of an SGLang serving fleet:
// cache-aware and load-aware selection policies for reverse_proxy, request
// parsing once per request, and (in later packages) prefill/decode
// disaggregation, a worker registry and metrics.
//
// Build it into Caddy with:
//
//	xcaddy build --with github.com/sglroute/sglroute
//
// Importing this package registers every sglroute module.
package sglroute

import (
	_ "github.com/sglroute/sglroute/caddymodule"
	_ "github.com/sglroute/sglroute/selection"
)
