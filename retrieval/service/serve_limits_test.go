package service

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// The bodies in flight share one budget, charged as bytes arrive: with room
// for one body, a second one is refused (503, retryable) while the first is
// held, instead of waiting behind it, and is served once the first is done.
func TestServeBoundsConcurrentBodies(t *testing.T) {
	g := &gateSearcher{gate: make(chan struct{}), entered: make(chan struct{}, 4)}
	srv := httptest.NewServer(NewHandler(g, 3, WithBodyBudget(serveMaxBody)))
	defer srv.Close()
	body := `{"queries":["a"],"topk":1,"return_scores":true}`
	post := func() (int, error) {
		// Each claims the whole budget.
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/retrieve", &paddedBody{s: body, n: serveMaxBody})
		req.ContentLength = serveMaxBody
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	first := make(chan int, 1)
	go func() {
		code, err := post()
		if err != nil {
			t.Error(err)
		}
		first <- code
	}()
	<-g.entered // the first body is read whole and held while it is searched
	// The server may close the connection before the client has sent the
	// whole body, so a transport error is a refusal too.
	if code, err := post(); err == nil && code != http.StatusServiceUnavailable {
		t.Errorf("second body while the first holds the budget: HTTP %d, want 503", code)
	}
	g.gate <- struct{}{}
	if code := <-first; code != 200 {
		t.Fatalf("first request: HTTP %d, want 200", code)
	}
	go func() { <-g.entered; g.gate <- struct{}{} }()
	if code, err := post(); err != nil || code != 200 {
		t.Fatalf("after the first: HTTP %d, %v; want 200 (the budget returned)", code, err)
	}
	if m := g.maxIn.Load(); m != 1 {
		t.Fatalf("%d searches ran at once under a budget of one body", m)
	}
}

// stallClients opens n connections that announce a 32 MiB body and send
// none of it, and returns once the handler has been entered for each.
func stallClients(t *testing.T, addr string, n int, entered <-chan struct{}) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", serveMaxBody)
		conns[i] = c
	}
	for range n {
		<-entered
	}
	return conns
}

// stillOpen says whether the server has neither answered c nor closed it.
func stillOpen(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// enteredHandler signals each /retrieve request with a body announced over
// 1 MiB as it reaches the handler.
func enteredHandler(h http.Handler, entered chan<- struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > 1<<20 {
			entered <- struct{}{}
		}
		h.ServeHTTP(w, r)
	})
}

// Item 3 of issue 33: five connections that announce a 32 MiB body and send
// nothing made every other client wait for the server's read timeout
// (119 s): they held the whole body budget, reserved from Content-Length.
// Now a normal request is answered while all five are still open.
func TestServeSilentClientsDelayNoOne(t *testing.T) {
	g := &gateSearcher{gate: make(chan struct{}, 1), entered: make(chan struct{}, 1)}
	g.gate <- struct{}{}
	entered := make(chan struct{}, 8)
	srv := httptest.NewUnstartedServer(enteredHandler(NewHandler(g, 3, WithBodyTimeouts(time.Hour, time.Hour)), entered))
	// The whole-request bound of the real server: before the fix it was
	// what finally released the budget the silent clients held.
	srv.Config.ReadTimeout = time.Second
	srv.Start()
	defer srv.Close()
	conns := stallClients(t, srv.Listener.Addr().String(), 5, entered)
	defer func() { // before srv.Close, which waits for their requests
		for _, c := range conns {
			c.Close()
		}
	}()
	resp, err := http.Post(srv.URL+"/retrieve", "application/json", strings.NewReader(`{"queries":["a"],"topk":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("normal request: HTTP %d", resp.StatusCode)
	}
	for i, c := range conns {
		if !stillOpen(c) {
			t.Fatalf("silent client %d was answered or closed before the normal request completed: the normal request waited for it", i+1)
		}
	}
}

// The silent clients themselves are answered 408 and disconnected once a
// chunk of their body is overdue.
func TestServeCutsOffSilentClients(t *testing.T) {
	entered := make(chan struct{}, 8)
	srv := httptest.NewServer(enteredHandler(NewHandler(&gateSearcher{}, 3, WithBodyTimeouts(50*time.Millisecond, time.Hour)), entered))
	defer srv.Close()
	for i, c := range stallClients(t, srv.Listener.Addr().String(), 3, entered) {
		defer c.Close()
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("silent client %d: %v", i+1, err)
		}
		msg, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(msg), "too slow") {
			t.Fatalf("silent client %d: HTTP %d %s, want 408 naming the rate", i+1, resp.StatusCode, msg)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("silent client %d: connection still open after the 408 (%v)", i+1, err)
		}
	}
}

// Item 2 of issue 33: 400 queries × topk 1000 with scores (a 22 KB request)
// took the server past 3 GB. Requests over ServeMaxResults results are
// refused with 413 naming the limit, before any search.
func TestServeCapsResults(t *testing.T) {
	g := &gateSearcher{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	srv := httptest.NewServer(NewHandler(g, 3))
	defer srv.Close()
	body := `{"queries":[` + strings.Repeat(`"the of and",`, 399) + `"the of and"],"topk":1000,"return_scores":true}`
	resp, err := http.Post(srv.URL+"/retrieve", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(msg), "400000 results: at most 100000 results per request") {
		t.Fatalf("HTTP %d %s, want 413 naming the 100000-result limit", resp.StatusCode, msg)
	}
	if g.maxIn.Load() != 0 {
		t.Fatal("the refused request was searched")
	}
}

// bigSearcher answers k copies of one chunk whose text is text.
type bigSearcher struct{ text string }

func (b bigSearcher) SearchBatch(_ context.Context, queries []string, k int) ([][]corpus.Ranked, []error) {
	out := make([][]corpus.Ranked, len(queries))
	for i := range out {
		out[i] = make([]corpus.Ranked, k)
		for j := range out[i] {
			out[i][j] = corpus.Ranked{Chunk: corpus.Chunk{ID: fmt.Sprintf("c%d", j), PassageID: "p", Text: b.text}, Score: float64(k - j)}
		}
	}
	return out, make([]error, len(queries))
}

func (bigSearcher) Served() Served { return Served{Method: "bm25", Documents: 1} }

// The response is streamed through a bounded buffer: while a client reads a
// 48 MB answer, the server's live heap grows by far less than the answer
// (built whole, it held all of it until the last byte was written).
func TestServeStreamsResponse(t *testing.T) {
	srv := httptest.NewServer(NewHandler(bigSearcher{text: strings.Repeat("x", 8<<10)}, 3))
	defer srv.Close()
	var before, during runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp, err := http.Post(srv.URL+"/retrieve", "application/json", strings.NewReader(
		`{"queries":[`+strings.Repeat(`"q",`, 29)+`"q"],"topk":100,"return_scores":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.CopyN(io.Discard, resp.Body, 1<<20); err != nil {
		t.Fatal(err)
	}
	// The server is now blocked writing the rest to a client that does not read.
	runtime.GC()
	runtime.ReadMemStats(&during)
	rest, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	total := rest + 1<<20
	if total < 3000*16<<10 {
		t.Fatalf("answer of %d bytes, want at least 3000 × 16 KiB", total)
	}
	if grew := int64(during.HeapAlloc) - int64(before.HeapAlloc); grew > 8<<20 {
		t.Fatalf("live heap grew by %d bytes while a %d-byte answer was sent, want under 8 MiB", grew, total)
	}
}

// The streamed answer is byte for byte what encoding/json makes of the
// whole response, with and without scores.
func TestServeStreamMatchesEncodingJSON(t *testing.T) {
	chunk := corpus.Chunk{ID: "d1#0", PassageID: "d1", Title: "<T> & \"u\"", Text: "é \u2028 text"}
	lists := [][]corpus.Ranked{{{Chunk: chunk, Score: 2.5}, {Chunk: corpus.Chunk{ID: "d2#0", PassageID: "d2", Text: "b"}, Score: -1e-9}}, {}}
	for _, scores := range []bool{true, false} {
		rec := httptest.NewRecorder()
		if err := writeResult(rec, lists, scores); err != nil {
			t.Fatal(err)
		}
		var want any
		if scores {
			r := RetrieveResponse{Result: [][]ScoredDocument{{}, {}}}
			for i, l := range lists {
				r.Result[i] = []ScoredDocument{}
				for _, c := range l {
					r.Result[i] = append(r.Result[i], ScoredDocument{Document: documentOf(c.Chunk), Score: &c.Score})
				}
			}
			want = r
		} else {
			r := struct {
				Result [][]Document `json:"result"`
			}{Result: [][]Document{{}, {}}}
			for i, l := range lists {
				for _, c := range l {
					r.Result[i] = append(r.Result[i], documentOf(c.Chunk))
				}
			}
			want = r
		}
		raw, _ := json.Marshal(want)
		if got := rec.Body.String(); got != string(raw)+"\n" {
			t.Fatalf("scores %v:\n got %s\nwant %s", scores, got, raw)
		}
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
