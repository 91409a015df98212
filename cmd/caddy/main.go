// Command caddy is Caddy with the standard modules and sglroute built in.
// It is the same binary `xcaddy build --with github.com/sglroute/sglroute`
// produces, built from this module so tests and the quick start need no xcaddy.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/sglroute/sglroute"
)

func main() { caddycmd.Main() }
