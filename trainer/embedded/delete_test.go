package embedded

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/himes-rl/himes/trainer"
)

// dirNames lists the file names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

func listedNames(t *testing.T, p trainer.Policy) []string {
	t.Helper()
	list, err := p.Checkpoints(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ck := range list {
		out = append(out, ck.Name)
	}
	return out
}

func TestEmbeddedDelete(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	dir := e.cfg.CheckpointDir
	if info, _ := e.Info(ctx); !info.Capabilities.Delete {
		t.Fatal("the embedded policy does not advertise delete")
	}
	if _, err := e.SFTStep(ctx, trainer.SFTRequest{StepID: "sft", Examples: sftBatch(), LearningRate: 0.1}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"keep", "old"} {
		if _, err := e.Save(ctx, trainer.SaveRequest{StepID: "save-" + n, Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	// A temporary file left by a save that crashed before its rename.
	crashed := filepath.Join(dir, ".old.json.tmp-123")
	if err := os.WriteFile(crashed, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := e.st.clone()

	d, err := e.Delete(ctx, trainer.DeleteRequest{StepID: "del-1", Name: "old"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (trainer.DeleteResponse{Name: "old", Deleted: true, PolicyVersion: 1}); d != want {
		t.Errorf("delete: %+v, want %+v", d, want)
	}
	if got, want := dirNames(t, dir), []string{"keep.json"}; !reflect.DeepEqual(got, want) {
		t.Errorf("checkpoint dir after delete: %v, want %v", got, want)
	}
	if got := listedNames(t, e); !reflect.DeepEqual(got, []string{"keep"}) {
		t.Errorf("listed after delete: %v, want [keep]", got)
	}
	if !reflect.DeepEqual(e.st, before) {
		t.Error("delete changed the policy state")
	}
	if _, err := e.Load(ctx, trainer.LoadRequest{StepID: "load-old", Name: "old"}); trainer.ErrorCode(err) != trainer.CodeNotFound {
		t.Errorf("load of a deleted checkpoint: %v, want not_found", err)
	}

	// The same step_id replays the first answer; nothing else happens.
	if r, err := e.Delete(ctx, trainer.DeleteRequest{StepID: "del-1", Name: "old"}); err != nil || r != (trainer.DeleteResponse{Name: "old", Deleted: true, PolicyVersion: 1, Replayed: true}) {
		t.Errorf("replay: %+v %v", r, err)
	}
	// A new delete of the missing name is idempotent: deleted false, no error.
	if r, err := e.Delete(ctx, trainer.DeleteRequest{StepID: "del-2", Name: "old"}); err != nil || r != (trainer.DeleteResponse{Name: "old", PolicyVersion: 1}) {
		t.Errorf("delete of a missing checkpoint: %+v %v, want deleted false", r, err)
	}
	for _, tc := range []struct {
		req  trainer.DeleteRequest
		code string
	}{
		{trainer.DeleteRequest{StepID: "del-3", Name: "../keep"}, trainer.CodeInvalidArgument},
		{trainer.DeleteRequest{StepID: "del-4", Name: ""}, trainer.CodeInvalidArgument},
		{trainer.DeleteRequest{StepID: "del-5", Name: ".hidden"}, trainer.CodeInvalidArgument},
		{trainer.DeleteRequest{Name: "keep"}, trainer.CodeInvalidArgument},               // no step_id
		{trainer.DeleteRequest{StepID: "del-1", Name: "keep"}, trainer.CodeConflict},     // step_id of another delete body
		{trainer.DeleteRequest{StepID: "save-keep", Name: "keep"}, trainer.CodeConflict}, // step_id of a save
		{trainer.DeleteRequest{StepID: strings.Repeat("x", 257), Name: "keep"}, trainer.CodeInvalidArgument},
	} {
		if _, err := e.Delete(ctx, tc.req); trainer.ErrorCode(err) != tc.code {
			t.Errorf("delete %+v: %v, want %s", tc.req, err, tc.code)
		}
	}
	if got := listedNames(t, e); !reflect.DeepEqual(got, []string{"keep"}) {
		t.Errorf("a refused delete removed something: %v", got)
	}
	if e.st.version != 1 {
		t.Errorf("policy_version %d after deletes, want 1", e.st.version)
	}

	// A damaged file under a name (never listed, refused by load) is removed too.
	if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := e.Delete(ctx, trainer.DeleteRequest{StepID: "del-bad", Name: "bad"}); err != nil || !r.Deleted {
		t.Errorf("delete of a damaged checkpoint: %+v %v", r, err)
	}
	// A name can be saved again after its delete.
	if _, err := e.Save(ctx, trainer.SaveRequest{StepID: "save-old-2", Name: "old"}); err != nil {
		t.Fatal(err)
	}
	if got := listedNames(t, e); !reflect.DeepEqual(got, []string{"keep", "old"}) {
		t.Errorf("listed after re-save: %v", got)
	}
	if _, err := e.Delete(ctx, trainer.DeleteRequest{StepID: "del-ctx", Name: "old"}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.Delete(cctx, trainer.DeleteRequest{StepID: "del-cancelled", Name: "keep"}); err == nil {
		t.Error("delete with a cancelled context succeeded")
	}
}

// onlyPolicy hides every method of the wrapped endpoint but Policy's and
// Scorer's, like an implementation written before /v1/delete.
type onlyPolicy struct {
	trainer.Policy
	trainer.Scorer
}

func TestDeleteOverHTTP(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	srv := httptest.NewServer(trainer.NewHandler(e, "sesame"))
	defer srv.Close()
	c := quietClient(srv.URL, "sesame")

	d, ok, err := trainer.AsDeleter(ctx, c)
	if err != nil || !ok || d == nil {
		t.Fatalf("AsDeleter(client of the embedded handler): %v %v", ok, err)
	}
	if _, err := c.Save(ctx, trainer.SaveRequest{Name: "ck"}); err != nil {
		t.Fatal(err)
	}
	r, err := c.Delete(ctx, trainer.DeleteRequest{StepID: "http-del", Name: "ck"})
	if err != nil || r != (trainer.DeleteResponse{Name: "ck", Deleted: true}) {
		t.Fatalf("delete over HTTP: %+v %v", r, err)
	}
	if names := listedNames(t, c); len(names) != 0 {
		t.Errorf("listed after delete: %v", names)
	}
	if got := dirNames(t, e.cfg.CheckpointDir); len(got) != 0 {
		t.Errorf("files left after delete: %v", got)
	}
	if r, err := c.Delete(ctx, trainer.DeleteRequest{StepID: "http-del", Name: "ck"}); err != nil || !r.Replayed || !r.Deleted {
		t.Errorf("replay over HTTP: %+v %v", r, err)
	}
	// An empty step_id is generated by the client.
	if r, err := c.Delete(ctx, trainer.DeleteRequest{Name: "ck"}); err != nil || r.Deleted || r.Replayed {
		t.Errorf("second delete over HTTP: %+v %v, want deleted false", r, err)
	}
	if _, err := c.Delete(ctx, trainer.DeleteRequest{Name: "a/b"}); trainer.ErrorCode(err) != trainer.CodeInvalidArgument || strings.Contains(err.Error(), "capabilities") {
		t.Errorf("bad name over HTTP: %v, want invalid_argument", err)
	}

	// An endpoint whose policy cannot delete: capability false, 404 at the
	// path, and the client's error says to check the capability.
	old := newTestEmbedded(t, nil)
	osrv := httptest.NewServer(trainer.NewHandler(onlyPolicy{old, old}, ""))
	defer osrv.Close()
	oc := quietClient(osrv.URL, "")
	info, err := oc.Info(ctx)
	if err != nil || info.Capabilities.Delete {
		t.Errorf("info of an endpoint without Deleter: delete %v, %v", info.Capabilities.Delete, err)
	}
	if _, ok, err := trainer.AsDeleter(ctx, oc); ok || err != nil {
		t.Errorf("AsDeleter(client of an old endpoint) = %v, %v; want false", ok, err)
	}
	if _, ok, _ := trainer.AsDeleter(ctx, onlyPolicy{old, old}); ok {
		t.Error("AsDeleter of a policy without Delete = true")
	}
	_, err = oc.Delete(ctx, trainer.DeleteRequest{Name: "ck"})
	if trainer.ErrorCode(err) != trainer.CodeNotFound || !strings.Contains(err.Error(), "info.capabilities.delete") {
		t.Errorf("delete on an old endpoint: %v, want not_found naming the capability", err)
	}
	// A proxy of that endpoint implements Deleter but must not advertise it.
	psrv := httptest.NewServer(trainer.NewHandler(oc, ""))
	defer psrv.Close()
	if info, err := quietClient(psrv.URL, "").Info(ctx); err != nil || info.Capabilities.Delete {
		t.Errorf("proxy of an old endpoint advertises delete=%v (%v)", info.Capabilities.Delete, err)
	}
}

// TestListDuringDeletes lists checkpoints while another goroutine saves and
// deletes them: a listing never fails and never shows a checkpoint that
// Load would refuse (the listing does not take the policy's lock).
func TestListDuringDeletes(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	done := make(chan error, 1)
	go func() {
		for i := range 150 {
			id := strings.Repeat("x", i%3+1)
			if _, err := e.Save(ctx, trainer.SaveRequest{StepID: fmt.Sprintf("s%d", i), Name: "ck-" + id}); err != nil {
				done <- err
				return
			}
			if _, err := e.Delete(ctx, trainer.DeleteRequest{StepID: fmt.Sprintf("d%d", i), Name: "ck-" + id}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if names := listedNames(t, e); len(names) != 0 {
				t.Errorf("listed after every checkpoint was deleted: %v", names)
			}
			return
		default:
		}
		list, err := e.Checkpoints(ctx)
		if err != nil {
			t.Fatalf("list during deletes: %v", err)
		}
		for _, ck := range list {
			if ck.PolicyVersion != 0 || ck.SizeBytes <= 0 {
				t.Errorf("listed %+v", ck)
			}
		}
	}
}
