package trainer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// WithReconnect sets how long a call waits for an endpoint that refuses
// connections before it fails (0: only the retries). A restarted `himes
// trainer serve` takes seconds to listen again; retries tuned for
// transient errors run out first (item 5 of issue 27). What the run then
// finds — a fresh policy — is the training loop's to handle (it reloads its
// checkpoint).
func WithReconnect(d time.Duration) ClientOption { return func(c *Client) { c.reconnect = max(d, 0) } }

// reconnectPoll is the wait between connection attempts while the
// endpoint is down.
const reconnectPoll = 250 * time.Millisecond

// attemptReconnecting is attempt, repeated while the endpoint refuses
// connections, for at most c.reconnect from the first refusal. No request
// reached the endpoint, so repeating it is always safe.
func (c *Client) attemptReconnecting(ctx context.Context, method, path, op string, body []byte, out any) (bool, error) {
	var deadline time.Time
	for {
		retry, err := c.attempt(ctx, method, path, op, body, out)
		if err == nil || c.reconnect <= 0 || ctx.Err() != nil || !refused(err) {
			return retry, err
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(c.reconnect)
			c.log.Warn("trainer unreachable: waiting for it to come back", "endpoint", c.base, "call", op,
				"reconnect_s", c.reconnect.Seconds(), "err", err)
		}
		if now.After(deadline) {
			return false, fmt.Errorf("%w (still refused after trainer.reconnect_s = %g s)", err, c.reconnect.Seconds())
		}
		t := time.NewTimer(min(reconnectPoll, time.Until(deadline)+time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, err
		case <-t.C:
		}
	}
}

// refused says whether err is a connection the endpoint's host refused:
// nothing listens on the port (a restart). A name that does not resolve or
// a host that does not answer is not waited for.
func refused(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) && errors.As(err, &op) && op.Op == "dial"
}
