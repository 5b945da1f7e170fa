package trainer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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
// bodies take trainer serve to 777 MB. The bodies in flight share one
// budget, charged as bytes arrive: with room for one, a second request is
// refused (503, retryable) while the first is held, rather than waiting
// behind it (item 3 of issue 33), and is served after it.
func TestHandlerBoundsConcurrentBodies(t *testing.T) {
	g := gatePolicy{gate: make(chan struct{}), entered: make(chan struct{}, 4)}
	srv := httptest.NewServer(NewHandler(g, "", WithMaxBodyBytes(1000), WithBodyBudget(1000)))
	defer srv.Close()
	body := `{"prompts":[{"id":"p","text":"q"}],"n":1}` + strings.Repeat(" ", 600)
	post := func() int {
		resp, err := http.Post(srv.URL+"/v1/sample", "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	first := make(chan int, 1)
	go func() { first <- post() }()
	<-g.entered
	if code := post(); code != http.StatusServiceUnavailable {
		t.Errorf("a second 600-byte body while the first holds the 1000-byte budget: HTTP %d, want 503", code)
	}
	g.gate <- struct{}{}
	if code := <-first; code != 200 {
		t.Fatalf("first: HTTP %d", code)
	}
	go func() { <-g.entered; g.gate <- struct{}{} }()
	if code := post(); code != 200 {
		t.Fatalf("after the first: HTTP %d, want 200", code)
	}
}

// Item 3 of issue 33: connections that announce a large body and send
// nothing must delay no one. A sample call is answered while five such
// connections are still open, and they are answered 408 and closed once
// their first chunk is overdue.
func TestHandlerSilentClientsDelayNoOne(t *testing.T) {
	for _, cutoff := range []bool{false, true} {
		g := gatePolicy{gate: make(chan struct{}, 1), entered: make(chan struct{}, 1)}
		g.gate <- struct{}{}
		chunk := time.Hour
		if cutoff {
			chunk = 50 * time.Millisecond
		}
		entered := make(chan struct{}, 8)
		h := NewHandler(g, "", WithBodyTimeouts(chunk, time.Hour))
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength > 1<<20 {
				entered <- struct{}{}
			}
			h.ServeHTTP(w, r)
		}))
		srv.Config.ReadTimeout = time.Second // before the fix, what released the budget
		srv.Start()
		var conns []net.Conn
		for range 5 {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "POST /v1/sample HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 60<<20)
			conns = append(conns, c)
		}
		for range conns {
			<-entered
		}
		if !cutoff {
			if code := postSample(t, srv.URL); code != 200 {
				t.Fatalf("normal request: HTTP %d", code)
			}
		}
		for i, c := range conns {
			br := bufio.NewReader(c)
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			if !cutoff {
				_, err := br.ReadByte()
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Fatalf("silent client %d was answered or closed before the normal request completed (%v)", i+1, err)
				}
				continue
			}
			_ = c.SetReadDeadline(time.Time{})
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("silent client %d: %v", i+1, err)
			}
			_, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("silent client %d: HTTP %d, want 408", i+1, resp.StatusCode)
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("silent client %d: still open after the 408 (%v)", i+1, err)
			}
		}
		for _, c := range conns {
			c.Close()
		}
		srv.Close()
	}
}

func postSample(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Post(url+"/v1/sample", "application/json", strings.NewReader(`{"prompts":[{"id":"p","text":"q"}],"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
