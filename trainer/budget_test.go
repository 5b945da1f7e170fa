package trainer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// gatePolicy answers sample calls once its gate opens.
type gatePolicy struct {
	Policy  // nil: only Sample is called
	gate    chan struct{}
	entered chan struct{}
}

func (g gatePolicy) Sample(context.Context, SampleRequest) (SampleResponse, error) {
	g.entered <- struct{}{}
	<-g.gate
	return SampleResponse{}, nil
}

// Item 9 of issue 27: the per-request limit alone let 8 concurrent 60 MiB
// bodies take trainer serve to 777 MB. The bodies in flight now share one
// budget: with room for one, a second request waits, before its body is
// read, until the first is answered.
func TestHandlerBoundsConcurrentBodies(t *testing.T) {
	g := gatePolicy{gate: make(chan struct{}), entered: make(chan struct{}, 4)}
	waited := make(chan struct{}, 4)
	h := NewHandler(g, "", WithMaxBodyBytes(1000), WithBodyBudget(1000)).(*handler)
	h.waiting = func() { waited <- struct{}{} }
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := `{"prompts":[{"id":"p","text":"q"}],"n":1}` + strings.Repeat(" ", 600)
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(srv.URL+"/v1/sample", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	<-g.entered
	select {
	case <-waited:
	case <-g.entered:
		close(g.gate)
		wg.Wait()
		t.Fatal("a second 600-byte body was taken in while the first held the 1000-byte budget")
	}
	g.gate <- struct{}{}
	<-g.entered
	g.gate <- struct{}{}
	wg.Wait()
	if codes[0] != 200 || codes[1] != 200 {
		t.Fatalf("HTTP %v, want both served", codes)
	}
}
