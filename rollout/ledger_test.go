package rollout

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

func sampleRecords() []Record {
	return []Record{
		{
			Step: 4, PromptID: "p1", ConvID: "c1", Turn: 3, GroupIndex: 0, SampleIndex: 1, PolicyVersion: 12,
			Question: "what about it?", Rewrite: "what about the eiffel tower",
			ChunkIDs: []string{"MARCO_1#0", "CAR_9#2"}, ChunkScores: []float64{12.5, 3.25},
			Memories: []string{"eiffel tower height"}, MemorySims: []float64{0.75},
			Answer: "It is 330 m tall.", RougeP: 0.5, RougeR: 0.25, RougeF1: 1.0 / 3, EM: 0, SquadF1: 0.4,
			Hit: 1, Alpha: 1, Beta: 0.5, Reward: 1.0/3 + 0.5, Advantage: -0.7, Included: true,
			Dedup: true, CacheHit: true, RetrieveSeconds: 0.001, RespondSeconds: 0.5, ScoreSeconds: 1e-6,
		},
		{
			// A failed rollout: no chunks, no memories (empty lists), an error.
			Step: 4, PromptID: "p1", ConvID: "c1", Turn: 3, GroupIndex: 0, SampleIndex: 2, PolicyVersion: 12,
			Rewrite: "ünïcödé ✓", Error: "respond: h: unavailable after 7 attempt(s): busy", ErrorKind: KindUnavailable,
		},
	}
}

func TestLedgerRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "rollouts.parquet")
	want := sampleRecords()
	if err := WriteLedger(t.Context(), path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadLedger(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip differs:\n got %+v\nwant %+v", got, want)
	}
	// Only the ledger is left: the temporary file was renamed, not copied.
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the ledger", len(entries))
	}
	// An empty ledger is valid too.
	empty := filepath.Join(t.TempDir(), "empty.parquet")
	if err := WriteLedger(t.Context(), empty, nil); err != nil {
		t.Fatal(err)
	}
	if recs, err := ReadLedger(t.Context(), empty); err != nil || len(recs) != 0 {
		t.Errorf("empty ledger: %d records, %v", len(recs), err)
	}
}

// The file is plain Parquet that other readers understand: flat columns with
// the json names and standard 3-level LIST columns for the slices.
func TestLedgerParquetSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.parquet")
	if err := WriteLedger(t.Context(), path, sampleRecords()); err != nil {
		t.Fatal(err)
	}
	r, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.NumRows() != 2 {
		t.Errorf("rows = %d", r.NumRows())
	}
	root := r.MetaData().Schema.Root()
	fields := map[string]schema.Node{}
	for i := range root.NumFields() {
		fields[root.Field(i).Name()] = root.Field(i)
	}
	for _, name := range []string{"step", "prompt_id", "rewrite", "answer", "reward", "rougeL_f1", "em", "hit",
		"advantage", "included", "error", "error_kind", "dedup", "cache_hit", "retrieve_seconds", "policy_version"} {
		n, ok := fields[name]
		if !ok {
			t.Errorf("column %q missing", name)
			continue
		}
		if _, ok := n.(*schema.PrimitiveNode); !ok {
			t.Errorf("column %q is not flat", name)
		}
	}
	for _, name := range []string{"chunk_ids", "chunk_scores", "memories", "memory_sims"} {
		g, ok := fields[name].(*schema.GroupNode)
		if !ok {
			t.Errorf("column %q is not a group (list) node", name)
			continue
		}
		if _, ok := g.LogicalType().(schema.ListLogicalType); !ok {
			t.Errorf("column %q logical type %v, want LIST", name, g.LogicalType())
		}
	}
	if v := r.MetaData().KeyValueMetadata().FindValue("ARROW:schema"); v == nil {
		t.Log("no embedded arrow schema (fine for other readers)")
	}
}

func TestReadLedgerErrors(t *testing.T) {
	if _, err := ReadLedger(t.Context(), filepath.Join(t.TempDir(), "absent.parquet")); err == nil {
		t.Error("missing file accepted")
	}
	bad := filepath.Join(t.TempDir(), "bad.parquet")
	if err := os.WriteFile(bad, []byte("not parquet at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadLedger(t.Context(), bad)
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("corrupt file: err = %v, want one naming %s", err, bad)
	}
}

// The columns readers prune files by carry min/max statistics.
func TestLedgerKeyColumnStatistics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.parquet")
	recs := sampleRecords()
	recs[1].Step, recs[1].PolicyVersion = 9, 3
	if err := WriteLedger(t.Context(), path, recs); err != nil {
		t.Fatal(err)
	}
	r, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rg := r.MetaData().RowGroup(0)
	want := map[string][2]int64{"step": {4, 9}, "policy_version": {3, 12}}
	for i := range rg.NumColumns() {
		cc, err := rg.ColumnChunk(i)
		if err != nil {
			t.Fatal(err)
		}
		name := cc.PathInSchema().String()
		st, err := cc.Statistics()
		if err != nil {
			t.Fatal(err)
		}
		switch name {
		case "step", "policy_version":
			s, ok := st.(*metadata.Int64Statistics)
			if !ok || !s.HasMinMax() || s.Min() != want[name][0] || s.Max() != want[name][1] {
				t.Errorf("column %s statistics %v, want min/max %v", name, st, want[name])
			}
		case "conv_id", "prompt_id":
			if st == nil || !st.HasMinMax() {
				t.Errorf("column %s has no min/max statistics", name)
			}
		}
	}
}

// A chunk of several steps reads back as all their records in order; steps
// must ascend; a finished chunk starts empty again.
func TestLedgerChunkOfSeveralSteps(t *testing.T) {
	c, err := NewLedgerChunk()
	if err != nil {
		t.Fatal(err)
	}
	a, b := sampleRecords(), sampleRecords()
	for i := range b {
		b[i].Step, b[i].Answer = 5, "answer of step 5"
	}
	if err := c.Append(4, a); err != nil {
		t.Fatal(err)
	}
	if err := c.Append(5, b); err != nil {
		t.Fatal(err)
	}
	if err := c.Append(5, b); err == nil {
		t.Fatal("step 5 appended twice")
	}
	if first, last, n := c.Steps(); first != 4 || last != 5 || n != 2 || c.Rows() != 4 {
		t.Fatalf("Steps() = %d %d %d, Rows() = %d; want 4 5 2, 4", first, last, n, c.Rows())
	}
	data, err := c.Finish()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "steps.parquet")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadLedger(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append([]Record{}, a...), b...); !reflect.DeepEqual(got, want) {
		t.Errorf("chunk reads back\n %+v\nwant %+v", got, want)
	}
	if _, _, n := c.Steps(); n != 0 || c.Rows() != 0 {
		t.Fatalf("after Finish the chunk holds %d steps, %d rows", n, c.Rows())
	}
	// Reused: the next chunk starts at any later step and holds only its own.
	if err := c.Append(9, a[:1]); err != nil {
		t.Fatal(err)
	}
	data, err = c.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadLedger(t.Context(), path); err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], a[0]) {
		t.Fatalf("second chunk: %+v, %v", got, err)
	}
}

func TestLedgerIOStopsOnACancelledContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.parquet")
	if err := WriteLedger(t.Context(), path, sampleRecords()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if recs, err := ReadLedger(ctx, path); !errors.Is(err, context.Canceled) || recs != nil {
		t.Errorf("read: %d records, err %v; want none and context.Canceled", len(recs), err)
	}
	other := filepath.Join(filepath.Dir(path), "m.parquet")
	if err := WriteLedger(ctx, other, sampleRecords()); !errors.Is(err, context.Canceled) {
		t.Errorf("write: err %v, want context.Canceled", err)
	}
	if _, err := os.Stat(other); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a cancelled write left %s (%v)", other, err)
	}
}
