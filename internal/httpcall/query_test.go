package httpcall

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

// DoJSON sends a path's ?query as the URL's query, not as an escaped part
// of the path (Elasticsearch's _stats/docs?level=shards).
func TestDoJSONPathWithQuery(t *testing.T) {
	var gotPath, gotQuery string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotQuery = r.URL.Path, r.URL.RawQuery
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	base, err := url.Parse(srv.URL + "/prefix")
	if err != nil {
		t.Fatal(err)
	}
	c := NewCaller("test", NewPool([]*url.URL{base}, []int{1}), Policy{Timeout: 10 * time.Second, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond}, 1)
	for path, want := range map[string][2]string{
		"/kb/_stats/docs?level=shards&x=1": {"/prefix/kb/_stats/docs", "level=shards&x=1"},
		"/kb/_count":                       {"/prefix/kb/_count", ""},
	} {
		var out map[string]any
		if _, err := c.DoJSON(t.Context(), c.Pool().Hosts()[0], http.MethodGet, path, nil, &out, nil); err != nil {
			t.Fatal(err)
		}
		if gotPath != want[0] || gotQuery != want[1] {
			t.Errorf("%s: server saw path %q query %q, want %q %q", path, gotPath, gotQuery, want[0], want[1])
		}
	}
}
