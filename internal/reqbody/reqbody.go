// Package reqbody reads a request body on a server so that a slow or silent
// client costs only itself (item 3 of issue 33): each chunk of the body must
// arrive within a deadline (a minimum rate), the memory budget that the
// bodies in flight share is charged with bytes as they arrive rather than
// reserved from Content-Length, and a request never waits for another's
// share — when the budget is full of bytes received it is answered 503.
package reqbody

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/semaphore"
)

// Chunk is the unit a body is read and charged in.
const Chunk = 64 << 10

// Defaults of Limits.
const (
	// DefaultChunkTimeout: a client must send each 64 KiB within 10 s
	// (at least 6.4 KiB/s), or the connection is closed.
	DefaultChunkTimeout = 10 * time.Second
	// DefaultTimeout bounds reading a whole body (a 64 MiB body at 0.5 MB/s).
	DefaultTimeout = 2 * time.Minute
)

// Budget bounds the body bytes of the requests in flight together.
type Budget struct {
	sem *semaphore.Weighted
	n   int64
}

// NewBudget returns a budget of n bytes.
func NewBudget(n int64) *Budget { return &Budget{sem: semaphore.NewWeighted(n), n: n} }

// Limits of one body.
type Limits struct {
	MaxBytes     int64         // larger bodies are refused with 413
	ChunkTimeout time.Duration // the longest one Chunk may take to arrive (0: DefaultChunkTimeout)
	Timeout      time.Duration // the longest the whole body may take (0: DefaultTimeout)
}

// Error is a body that could not be read, with the HTTP status to answer.
type Error struct {
	Status int
	Msg    string
	Err    error
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// Read reads r's body whole. The bytes stay charged to b until release is
// called (after the handler is done with what it decoded from them); on
// error nothing stays charged. A silent client holds at most one Chunk of
// the budget until its deadline closes the connection.
func Read(w http.ResponseWriter, r *http.Request, b *Budget, lim Limits) (body []byte, release func(), err error) {
	if r.ContentLength > lim.MaxBytes {
		// Refused from the header alone, before a byte of the body is read.
		return nil, nil, &Error{Status: http.StatusRequestEntityTooLarge,
			Msg: fmt.Sprintf("request body of %d bytes, at most %d", r.ContentLength, lim.MaxBytes)}
	}
	chunkTimeout, timeout := lim.ChunkTimeout, lim.Timeout
	if chunkTimeout <= 0 {
		chunkTimeout = DefaultChunkTimeout
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	// The deadline set here replaces the server's: never extend past the
	// serving http.Server's ReadTimeout (WithServerTimeout), which bounds
	// the whole request.
	if d, ok := r.Context().Value(serverTimeoutKey{}).(time.Duration); ok && d > 0 && d < timeout {
		timeout = d
	}
	end := time.Now().Add(timeout)
	rc := http.NewResponseController(w)
	var held int64
	release = func() {
		if held > 0 {
			b.sem.Release(held)
			held = 0
		}
	}
	in := http.MaxBytesReader(w, r.Body, lim.MaxBytes)
	var buf []byte
	for {
		want := int64(Chunk)
		if r.ContentLength >= 0 {
			// The rest of the body, or one byte to see its end.
			want = min(want, max(r.ContentLength-int64(len(buf)), 1))
		}
		if !b.sem.TryAcquire(want) {
			release()
			return nil, nil, &Error{Status: http.StatusServiceUnavailable,
				Msg: fmt.Sprintf("server busy: the request bodies in flight fill its %d-byte budget; retry later", b.n)}
		}
		held += want
		// Each chunk has its own deadline, within the whole body's: a
		// client that stops sending is cut off, one that sends is not.
		dl := time.Now().Add(chunkTimeout)
		if dl.After(end) {
			dl = end
		}
		if err := rc.SetReadDeadline(dl); err != nil && !errors.Is(err, http.ErrNotSupported) {
			release()
			return nil, nil, &Error{Status: http.StatusInternalServerError, Msg: fmt.Sprintf("request body: set read deadline: %v", err), Err: err}
		}
		if cap(buf)-len(buf) < int(want) {
			grown := make([]byte, len(buf), max(2*cap(buf), len(buf)+int(want)))
			copy(grown, buf)
			buf = grown
		}
		n, err := fill(in, buf[len(buf):len(buf)+int(want)])
		buf = buf[:len(buf)+n]
		b.sem.Release(want - int64(n))
		held -= want - int64(n)
		if errors.Is(err, io.EOF) {
			return buf, release, nil
		}
		if err != nil {
			release()
			return nil, nil, classify(err, lim.MaxBytes, chunkTimeout, timeout, time.Now().After(end))
		}
	}
}

type serverTimeoutKey struct{}

// WithServerTimeout hands h's requests the serving http.Server's
// ReadTimeout d, so that Read, which sets the connection's read deadline
// itself, never gives a body longer than the server allows.
func WithServerTimeout(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), serverTimeoutKey{}, d)))
	})
}

// fill reads until p is full or the reader fails; io.EOF is returned as is
// (io.ReadFull would call a short body's end io.ErrUnexpectedEOF).
func fill(r io.Reader, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k, err := r.Read(p[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func classify(err error, maxBytes int64, chunkTimeout, timeout time.Duration, pastEnd bool) *Error {
	var tooBig *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooBig):
		return &Error{Status: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf("request body over %d bytes", maxBytes), Err: err}
	case errors.As(err, &ne) && ne.Timeout() && pastEnd:
		return &Error{Status: http.StatusRequestTimeout, Msg: fmt.Sprintf("request body not received within %s", timeout), Err: err}
	case errors.As(err, &ne) && ne.Timeout():
		return &Error{Status: http.StatusRequestTimeout,
			Msg: fmt.Sprintf("request body too slow: no %d bytes within %s", Chunk, chunkTimeout), Err: err}
	}
	return &Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("request body: %v", err), Err: err}
}
