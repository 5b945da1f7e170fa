package ablate

import (
	"errors"
	"sync"
	"testing"
)

// The count a sweep or transfer reports: it starts at 0 of the total, each
// end adds its runs (a failed fold ends all of its runs at once), and the
// reports arrive one at a time, ended strictly increasing to the total.
func TestRunCountReportsEveryEnd(t *testing.T) {
	type rep struct{ ended, failed, total int }
	var got []rep
	c := newRunCount(func(e, f, n int) { got = append(got, rep{e, f, n}) }, 23)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			var err error
			if i%5 == 0 {
				err = errors.New("boom")
			}
			c.end(1, err)
		})
	}
	wg.Wait()
	c.end(3, errors.New("fold's training file")) // a fold of 3 runs that never started
	if len(got) != 22 || got[0] != (rep{0, 0, 23}) {
		t.Fatalf("%d reports, first %+v; want 22 starting at 0 of 23", len(got), got[0])
	}
	for i := 1; i < len(got); i++ {
		if got[i].ended <= got[i-1].ended || got[i].total != 23 || got[i].failed < got[i-1].failed {
			t.Fatalf("report %d %+v after %+v", i, got[i], got[i-1])
		}
	}
	// 4 of the 20 single runs failed (i = 0, 5, 10, 15), then 3 more at once
	if last := got[len(got)-1]; last != (rep{23, 7, 23}) {
		t.Errorf("last report %+v, want 23 ended, 7 failed, of 23", last)
	}
	newRunCount(nil, 5).end(1, nil) // no reporter: nothing to call
}
