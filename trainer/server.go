package trainer

import (
	"net"
	"net/http"
	"time"

	"github.com/himes-rl/himes/internal/reqbody"
)

// ServerOptions bound how long one client may hold a connection of a served
// endpoint. Zero values take the defaults.
type ServerOptions struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included (default
	// 2m: a 64 MiB body at 0.5 MB/s). Without it a client that sends its
	// body slowly holds a connection and a goroutine indefinitely. While
	// a body is read the handler's own deadlines (internal/reqbody: each
	// 64 KiB within 10 s, the whole within this) take its place.
	ReadTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long (default 2m).
	IdleTimeout time.Duration
}

// Defaults of ServerOptions.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 2 * time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
)

// NewServer returns an http.Server for h (usually NewHandler's) with the
// read timeouts of opts. There is no write timeout: a grpo_step on a large
// batch may legitimately run for minutes.
func NewServer(h http.Handler, opts ServerOptions) *http.Server {
	or := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	read := or(opts.ReadTimeout, DefaultReadTimeout)
	return &http.Server{
		Handler:           reqbody.WithServerTimeout(h, read),
		ReadHeaderTimeout: or(opts.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		ReadTimeout:       read,
		IdleTimeout:       or(opts.IdleTimeout, DefaultIdleTimeout),
	}
}

// ExposedWithoutToken says whether an endpoint listening on addr without a
// token can be reached beyond this machine: anyone who can connect could
// then read and change the policy.
func ExposedWithoutToken(addr net.Addr, token string) bool {
	if token != "" {
		return false
	}
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return false // a Unix socket: guarded by file permissions
	}
	return !tcp.IP.IsLoopback()
}
