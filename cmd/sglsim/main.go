// Command sglsim runs a fleet of simulated SGLang workers (package sim).
//
//	sglsim -n 4 -host 127.0.0.1 -base-port 0 -cache-tokens 65536 \
//	       -prefill-per-token 20us -decode-per-token 1ms
//
// It prints one line per worker, "w0 http://127.0.0.1:PORT", to stdout and
// runs until SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sglroute/sglroute/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sglsim:", err)
		os.Exit(1)
	}
}

// run starts the fleet described by args, writes "name URL" lines to stdout
// and serves until ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sglsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		n         = fs.Int("n", 1, "number of workers")
		host      = fs.String("host", "127.0.0.1", "listen host")
		basePort  = fs.Int("base-port", 0, "first port; workers use base-port..base-port+n-1 (0 = free ports)")
		portsFile = fs.String("ports-file", "", "write the worker URLs to this file, one per line")
		verbose   = fs.Bool("v", false, "log requests to stderr")
		cfg       sim.Config
	)
	fs.StringVar(&cfg.Model, "model", "sim-model", "served model name")
	fs.IntVar(&cfg.DPSize, "dp-size", 1, "data-parallel ranks reported")
	fs.StringVar(&cfg.DisaggregationMode, "disaggregation-mode", "null", "null | prefill | decode (reported only)")
	fs.IntVar(&cfg.CharsPerToken, "chars-per-token", 4, "pseudo-tokenizer ASCII chars per token")
	fs.IntVar(&cfg.CacheTokens, "cache-tokens", 65536, "prefix cache capacity in tokens (0 = no cache)")
	fs.DurationVar(&cfg.PrefillPerToken, "prefill-per-token", 20*time.Microsecond, "prefill time per uncached token")
	fs.DurationVar(&cfg.DecodePerToken, "decode-per-token", time.Millisecond, "decode time per output token")
	fs.IntVar(&cfg.MaxBatch, "max-batch", 64, "max concurrently decoding requests")
	fs.DurationVar(&cfg.Latency, "latency", 0, "extra latency before each generation request")
	fs.Float64Var(&cfg.ErrorRate, "error-rate", 0, "fraction of generation requests failing with -error-status")
	fs.IntVar(&cfg.ErrorStatus, "error-status", 500, "status of injected failures")
	fs.IntVar(&cfg.FailFirstN, "fail-first-n", 0, "fail the first N generation requests of each worker")
	fs.BoolVar(&cfg.CrashMidStream, "crash-mid-stream", false, "abort connections halfway through responses")
	fs.DurationVar(&cfg.UnhealthyAfter, "unhealthy-after", 0, "health endpoints answer 503 after this long (0 = never)")
	fs.Int64Var(&cfg.Seed, "seed", 1, "RNG seed (worker i uses seed+i)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if *n < 1 {
		return fmt.Errorf("-n must be >= 1")
	}
	logger := log.New(stderr, "", log.LstdFlags|log.Lmicroseconds)
	if *verbose {
		cfg.Logf = logger.Printf
	}
	addrs := make([]string, *n)
	for i := range addrs {
		port := 0
		if *basePort > 0 {
			port = *basePort + i
		}
		addrs[i] = net.JoinHostPort(*host, strconv.Itoa(port))
	}
	servers, err := sim.StartFleetAddrs(addrs, cfg)
	if err != nil {
		return err
	}
	defer sim.CloseAll(servers)

	var urls strings.Builder
	for _, s := range servers {
		urls.WriteString(s.URL + "\n")
	}
	if *portsFile != "" {
		tmp := *portsFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(urls.String()), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, *portsFile); err != nil {
			return err
		}
	}

	// Print last, so that a reader of stdout can rely on the ports file.
	for _, s := range servers {
		fmt.Fprintf(stdout, "%s %s\n", s.Worker.Name(), s.URL)
	}
	<-ctx.Done()
	if *verbose {
		logger.Printf("shutting down %d workers", len(servers))
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range servers {
		s.Shutdown(sctx)
	}
	return nil
}
