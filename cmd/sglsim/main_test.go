package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	portsFile := filepath.Join(t.TempDir(), "ports")
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-n", "3", "-host", "127.0.0.1", "-base-port", "0", "-ports-file", portsFile,
			"-cache-tokens", "100", "-decode-per-token", "0", "-prefill-per-token", "0", "-model", "m"}, pw, io.Discard)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var urls []string
	for i := 0; i < 3; i++ {
		if !sc.Scan() {
			t.Fatalf("stdout ended early: %v", <-done)
		}
		f := strings.Fields(sc.Text())
		if len(f) != 2 || f[0] != "w"+string(rune('0'+i)) || !strings.HasPrefix(f[1], "http://127.0.0.1:") {
			t.Fatalf("bad line %q", sc.Text())
		}
		urls = append(urls, f[1])
	}
	b, err := os.ReadFile(portsFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(b)); strings.Join(got, " ") != strings.Join(urls, " ") {
		t.Fatalf("ports file %q, stdout %q", got, urls)
	}
	for i, u := range urls {
		resp, err := http.Get(u + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-SGLSim-Worker") != "w"+string(rune('0'+i)) {
			t.Fatalf("%s: %d %v", u, resp.StatusCode, resp.Header)
		}
	}
	cancel()
	go io.Copy(io.Discard, pr)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func TestRunBadFlags(t *testing.T) {
	if err := run(context.Background(), []string{"-n", "0"}, io.Discard, io.Discard); err == nil {
		t.Fatal("expected error for -n 0")
	}
	if err := run(context.Background(), []string{"-bogus"}, io.Discard, io.Discard); err == nil {
		t.Fatal("expected error for unknown flag")
	}
}
