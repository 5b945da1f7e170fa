package service

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/himes-rl/himes/retrieval/corpus"
)

// gateSearcher answers every query with one chunk once its gate opens, and
// counts the searches in flight.
type gateSearcher struct {
	gate      chan struct{}
	in, maxIn atomic.Int32
	entered   chan struct{}
}

func (g *gateSearcher) SearchBatch(_ context.Context, queries []string, k int) ([][]corpus.Ranked, []error) {
	n := g.in.Add(1)
	for {
		m := g.maxIn.Load()
		if n <= m || g.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	g.entered <- struct{}{}
	<-g.gate
	g.in.Add(-1)
	out := make([][]corpus.Ranked, len(queries))
	for i := range out {
		out[i] = []corpus.Ranked{{Chunk: corpus.Chunk{ID: "c1", Text: "t"}, Score: 1}}
	}
	return out, make([]error, len(queries))
}

func (g *gateSearcher) Served() Served { return Served{Method: "bm25", Documents: 1} }

// Item 9 of issue 27: a body over the limit is refused from its
// Content-Length, before the body is read: the server answers 413 although
// the client sends only a few bytes of the 40 MiB it announced (reading
// first, it would answer 400 at the early end of the body).
func TestServeRefusesFromContentLength(t *testing.T) {
	srv := httptest.NewServer(NewHandler(&gateSearcher{}, 3))
	defer srv.Close()
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"queries\":", 40<<20)
	_ = c.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("HTTP %d, want 413 from the header alone", resp.StatusCode)
	}
}

// The bodies in flight share one budget: with room for one body, a second
// request waits until the first is answered, and both are served.
func TestServeBoundsConcurrentBodies(t *testing.T) {
	g := &gateSearcher{gate: make(chan struct{}), entered: make(chan struct{}, 4)}
	waited := make(chan struct{}, 4)
	hook := func(o *handlerOptions) { o.waiting = func() { waited <- struct{}{} } }
	srv := httptest.NewServer(NewHandler(g, 3, WithBodyBudget(serveMaxBody), hook))
	defer srv.Close()
	body := `{"queries":["a"],"topk":1,"return_scores":true}`
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each claims the whole budget.
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/retrieve", &paddedBody{s: body, n: serveMaxBody})
			req.ContentLength = serveMaxBody
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	<-g.entered // one search runs; the other request must wait for the budget
	select {
	case <-waited:
	case <-g.entered:
		close(g.gate) // let both finish, then fail
		wg.Wait()
		t.Fatal("a second search started while the first held the whole budget")
	}
	g.gate <- struct{}{}
	<-g.entered
	g.gate <- struct{}{}
	wg.Wait()
	if m := g.maxIn.Load(); m != 1 {
		t.Fatalf("%d searches ran at once under a budget of one body", m)
	}
	if codes[0] != 200 || codes[1] != 200 {
		t.Fatalf("HTTP %v, want both served", codes)
	}
}

// paddedBody is s followed by spaces up to n bytes (JSON allows the
// trailing whitespace), so a request can claim a large Content-Length.
type paddedBody struct {
	s    string
	n, i int
}

func (p *paddedBody) Read(b []byte) (int, error) {
	if p.i >= p.n {
		return 0, io.EOF
	}
	k := 0
	for k < len(b) && p.i < p.n {
		if p.i < len(p.s) {
			b[k] = p.s[p.i]
		} else {
			b[k] = ' '
		}
		k++
		p.i++
	}
	return k, nil
}

// Item 9: retrieval serve takes a bearer token, as trainer serve does.
func TestServeToken(t *testing.T) {
	g := &gateSearcher{gate: make(chan struct{}, 8), entered: make(chan struct{}, 8)}
	for range 8 {
		g.gate <- struct{}{}
	}
	srv := httptest.NewServer(NewHandler(g, 3, WithToken("sesame")))
	defer srv.Close()
	for auth, want := range map[string]int{"": 401, "Bearer nope": 401, "Bearer sesame": 200} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/retrieve", strings.NewReader(`{"queries":["a"]}`))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Authorization %q: HTTP %d, want %d", auth, resp.StatusCode, want)
		}
	}
	// The client sends the token its config names.
	t.Setenv("HIMES_TEST_RETRIEVAL_TOKEN", "sesame")
	r, err := NewRemoteService(RemoteConfig{Call: Config{URL: HostList{srv.URL}, MaxPerHost: 1, MaxBatch: 8, Timeout: 1 << 34, Retries: 0}, TokenEnv: "HIMES_TEST_RETRIEVAL_TOKEN"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.post(context.Background(), nil, []string{"a"}, 1); err != nil {
		t.Fatalf("client with the token: %v", err)
	}
}
