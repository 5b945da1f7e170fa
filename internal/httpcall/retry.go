package httpcall

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Backoff is the wait between retries: an exponential ceiling that doubles
// from Base up to Max, with "equal jitter" (half fixed, half random) so a
// burst of rejected calls spreads out instead of returning in lock-step. The
// jitter never affects results, only timing.
type Backoff struct {
	base, max time.Duration
	mu        sync.Mutex
	rng       *rand.Rand
}

// NewBackoff returns a backoff of the given first delay and ceiling.
func NewBackoff(base, maxDelay time.Duration, seed uint64) *Backoff {
	return &Backoff{base: base, max: maxDelay, rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))}
}

// Delay is the wait before retry number n (1-based).
func (b *Backoff) Delay(n int) time.Duration {
	d := b.base << min(n-1, 30)
	if d <= 0 || d > b.max {
		d = b.max
	}
	b.mu.Lock()
	j := time.Duration(b.rng.Int64N(int64(d)/2 + 1))
	b.mu.Unlock()
	return d/2 + j
}

// Retry is the one retry loop of himes's HTTP clients. It calls attempt
// (n = 0, 1, …) until it succeeds, returns a failure not worth retrying
// (retry false), or has been retried retries times, waiting b.Delay between
// attempts and telling onRetry (may be nil) before each wait. It returns nil
// on success, else the last attempt's error; when ctx ends, an error that
// wraps ctx.Err() and names the last attempt's error.
func Retry(ctx context.Context, retries int, b *Backoff, attempt func(n int) (retry bool, err error),
	onRetry func(n int, delay time.Duration, err error)) error {
	for n := 0; ; n++ {
		retry, err := attempt(n)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		}
		if !retry || n >= retries {
			return err
		}
		d := b.Delay(n + 1)
		if onRetry != nil {
			onRetry(n+1, d, err)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}
