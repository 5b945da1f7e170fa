package retrieval

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestPipelineOnDiskIndex: a pipeline on an on-disk index does not load the
// KB, yet retrieves the same chunks (texts from the document store) with
// the same scores as one on the in-memory index, memory re-ranking
// included; a changed KB is refused, a merely touched one accepted.
func TestPipelineOnDiskIndex(t *testing.T) {
	var b strings.Builder
	for i, s := range []string{"red apple pie recipe", "green pear and apple", "the red planet mars",
		"apple orchard in spring", "pear tart with cream", "mars rover landing"} {
		b.WriteString(`{"id":"p` + string(rune('a'+i)) + `","title":"T` + string(rune('0'+i)) + `","text":"` + s + `"}` + "\n")
	}
	kb := writeFile(t, "kb.jsonl", b.String())
	cfg := DefaultConfig()
	cfg.TopK, cfg.Candidates = 2, 4
	cfg.Memory.Enabled = true
	mem, err := Open(t.Context(), cfg, kb)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := BuildDiskIndex(t.Context(), cfg, kb, dir, DiskBuildOptions{}); err != nil {
		t.Fatal(err)
	}
	dcfg := cfg
	dcfg.Index = dir
	disk, err := Open(t.Context(), dcfg, kb)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	if disk.Chunks() != nil || disk.KB().Passages != nil || !disk.Index().IsDisk() {
		t.Fatal("the on-disk pipeline loaded the knowledge base")
	}
	if disk.NumChunks() != 6 || mem.NumChunks() != 6 {
		t.Fatalf("chunks: disk %d memory %d", disk.NumChunks(), mem.NumChunks())
	}
	for _, q := range []string{"apple", "red mars", "pear cream apple", "nothing"} {
		got, err := disk.Search(t.Context(), q, 4)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := mem.Search(t.Context(), q, 4)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: disk %+v, memory %+v", q, got, want)
		}
		gr, err := disk.Retrieve(t.Context(), "u1", q, q)
		if err != nil {
			t.Fatal(err)
		}
		wr, _ := mem.Retrieve(t.Context(), "u1", q, q)
		if !reflect.DeepEqual(gr.Chunks, wr.Chunks) {
			t.Fatalf("retrieve %q: disk %+v, memory %+v", q, gr.Chunks, wr.Chunks)
		}
	}
	if c, ok := disk.Chunk("pb#0"); !ok || c.Text != "green pear and apple" || c.Title != "T1" || c.PassageID != "pb" {
		t.Fatalf("Chunk(pb#0) = %+v, %v", c, ok)
	}
	if _, ok := disk.Chunk("zz#0"); ok || disk.PassageOf("pc#0") != "pc" || disk.PassageOf("zz#0") != "" {
		t.Fatal("chunk lookup of unknown ids")
	}
	if !disk.knownID()("pc") || !disk.knownID()("pc#0") || disk.knownID()("zz") {
		t.Fatal("knownID on disk")
	}
	for _, p := range []*Pipeline{disk, mem} {
		if has, ok := p.HasPassage("pc"); !has || !ok {
			t.Fatalf("HasPassage(pc) = %v, %v", has, ok)
		}
		if has, ok := p.HasPassage("pc#0"); has || !ok { // a chunk id is not a passage id
			t.Fatalf("HasPassage(pc#0) = %v, %v", has, ok)
		}
		if has, ok := p.HasPassage("zz"); has || !ok {
			t.Fatalf("HasPassage(zz) = %v, %v", has, ok)
		}
	}

	other := dcfg
	other.K1 = 1.5
	if _, err := Open(t.Context(), other, kb); err == nil || !strings.Contains(err.Error(), "k1=0.9") {
		t.Fatalf("other k1: %v", err)
	}
	// touched, same bytes: accepted after hashing
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(kb, later, later); err != nil {
		t.Fatal(err)
	}
	if p, err := Open(t.Context(), dcfg, kb); err != nil {
		t.Fatalf("touched KB refused: %v", err)
	} else {
		p.Close()
	}
	raw, _ := os.ReadFile(kb)
	// same size, one letter changed
	if err := os.WriteFile(kb, []byte(strings.Replace(string(raw), "red apple", "red appla", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(t.Context(), dcfg, kb); err == nil || !strings.Contains(err.Error(), "stale") || !strings.Contains(err.Error(), "SHA-256") {
		t.Fatalf("edited KB: %v", err)
	}
	if err := os.WriteFile(kb, append(raw, []byte(`{"id":"pz","text":"more"}`+"\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(t.Context(), dcfg, kb); err == nil || !strings.Contains(err.Error(), "stale") || !strings.Contains(err.Error(), "bytes") {
		t.Fatalf("grown KB: %v", err)
	}
}
