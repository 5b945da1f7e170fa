package embedded

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/himes-rl/himes/trainer"
)

// Item 8 of issue 27: `himes trainer serve` answered 200 to a body with
// bytes after its JSON value; retrieval serve refused it. Both refuse now.
func TestHandlerRefusesTrailingBytes(t *testing.T) {
	srv := httptest.NewServer(trainer.NewHandler(newTestEmbedded(t, nil), ""))
	defer srv.Close()
	sample := `{"prompts":[{"id":"p","text":"where is paris"}],"n":1,"temperature":0,"top_p":1,"max_tokens":8,"seed":1}`
	for body, want := range map[string]int{
		sample:                  http.StatusOK,
		sample + "\n  \n":       http.StatusOK, // whitespace is no data
		sample + " garbage":     http.StatusBadRequest,
		sample + sample:         http.StatusBadRequest,
		sample + ` {"n":2}`:     http.StatusBadRequest,
		sample + "\x00\x00\x00": http.StatusBadRequest,
	} {
		resp, err := http.Post(srv.URL+"/v1/sample", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("body %.60q…: HTTP %d, want %d", body[len(sample)-10:], resp.StatusCode, want)
		}
	}
}
