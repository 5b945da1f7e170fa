package httpcall

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRetryStopsWhereItShould(t *testing.T) {
	b := NewBackoff(time.Microsecond, time.Microsecond, 1)
	fail := errors.New("boom")
	cases := []struct {
		name      string
		retries   int
		results   []bool // per attempt: succeeds?
		retryable bool
		calls     int
		wantErr   bool
	}{
		{"first try", 3, []bool{true}, true, 1, false},
		{"succeeds on the third", 3, []bool{false, false, true}, true, 3, false},
		{"out of retries", 2, []bool{false, false, false, true}, true, 3, true},
		{"not retryable", 5, []bool{false, true}, false, 1, true},
		{"no retries", 0, []bool{false, true}, true, 1, true},
	}
	for _, c := range cases {
		calls, retried := 0, 0
		err := Retry(context.Background(), c.retries, b, func(n int) (bool, error) {
			if n != calls {
				t.Fatalf("%s: attempt numbered %d, want %d", c.name, n, calls)
			}
			calls++
			if c.results[n] {
				return false, nil
			}
			return c.retryable, fail
		}, func(n int, _ time.Duration, err error) {
			retried++
			if n != retried || !errors.Is(err, fail) {
				t.Errorf("%s: onRetry(%d, %v), want (%d, boom)", c.name, n, err, retried)
			}
		})
		if calls != c.calls || (err != nil) != c.wantErr || retried != calls-1 {
			t.Errorf("%s: %d calls, %d retries, err %v; want %d calls, %d retries, error %v",
				c.name, calls, retried, err, c.calls, c.calls-1, c.wantErr)
		}
		if err != nil && !errors.Is(err, fail) {
			t.Errorf("%s: err %v should be the last attempt's", c.name, err)
		}
	}
}

func TestRetryCancelledDuringWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	b := NewBackoff(time.Hour, time.Hour, 1)
	fail := errors.New("boom")
	err := Retry(ctx, 3, b, func(int) (bool, error) { return true, fail },
		func(int, time.Duration, error) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}
