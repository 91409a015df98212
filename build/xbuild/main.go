// Command xbuild builds a custom Caddy binary from a pinned build manifest,
// xcaddy.json at the repository root, using xcaddy as a library.
//
// xcaddy v0.4.5's command line reads only flags and environment variables;
// its Builder type, though, has JSON tags. xcaddy.json is that type's JSON
// form (caddy_version, plugins, replacements, build_flags, ...), so the
// build that CI and releases use is written down, reviewed and versioned
// instead of living in a shell history. Relative replacement paths are taken
// relative to the manifest's folder.
//
// Usage (from the repository root; `make xcaddy` does this):
//
//	go run -C build/xbuild . -manifest ../../xcaddy.json -o ../../bin/caddy-xcaddy
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/caddyserver/xcaddy"
)

func main() {
	manifest := flag.String("manifest", "xcaddy.json", "build manifest: the JSON form of xcaddy's Builder")
	output := flag.String("o", "caddy", "output binary")
	flag.Parse()

	b, err := load(*manifest)
	if err != nil {
		log.Fatalf("xbuild: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := b.Build(ctx, *output); err != nil {
		log.Fatalf("xbuild: %v", err)
	}
}

// load reads and checks a manifest, resolving relative replacement paths.
func load(path string) (xcaddy.Builder, error) {
	var b xcaddy.Builder
	raw, err := os.ReadFile(path)
	if err != nil {
		return b, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return b, fmt.Errorf("%s: %w", path, err)
	}
	if b.CaddyVersion == "" {
		return b, fmt.Errorf("%s: caddy_version is required (pin it)", path)
	}
	base, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return b, err
	}
	for i, r := range b.Replacements {
		n := string(r.New)
		if strings.HasPrefix(n, ".") {
			b.Replacements[i].New = xcaddy.ReplacementPath(filepath.Join(base, n))
		}
	}
	return b, nil
}
