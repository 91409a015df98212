package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Server is a worker listening on a TCP address.
type Server struct {
	URL    string // "http://host:port"
	Addr   string // "host:port"
	Worker *Worker

	srv *http.Server
	ln  net.Listener
}

// Start creates a worker and serves it on addr ("127.0.0.1:0" picks a free
// port) in a background goroutine.
func Start(cfg Config, addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	w := New(cfg)
	s := &Server{
		URL:    "http://" + ln.Addr().String(),
		Addr:   ln.Addr().String(),
		Worker: w,
		ln:     ln,
		srv:    &http.Server{Handler: w.Handler(), ReadHeaderTimeout: 30 * time.Second},
	}
	go s.srv.Serve(ln)
	return s, nil
}

// Close stops the server immediately, closing open connections.
func (s *Server) Close() error {
	err := s.srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Shutdown stops the server gracefully.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// StartFleet starts n workers on free ports of host (default "127.0.0.1"),
// named "w0".."w{n-1}". Worker i gets Seed base.Seed+i. On error, already
// started workers are closed.
func StartFleet(n int, base Config, host string) ([]*Server, error) {
	if host == "" {
		host = "127.0.0.1"
	}
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = net.JoinHostPort(host, "0")
	}
	return StartFleetAddrs(addrs, base)
}

// StartFleetAddrs starts one worker per address, named "w0".."w{n-1}".
func StartFleetAddrs(addrs []string, base Config) ([]*Server, error) {
	out := make([]*Server, 0, len(addrs))
	for i, a := range addrs {
		cfg := base
		cfg.Name = fmt.Sprintf("w%d", i)
		cfg.Seed = base.Seed + int64(i)
		s, err := Start(cfg, a)
		if err != nil {
			CloseAll(out)
			return nil, fmt.Errorf("sglsim: worker %s on %s: %w", cfg.Name, a, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// CloseAll closes every server.
func CloseAll(servers []*Server) {
	for _, s := range servers {
		s.Close()
	}
}
