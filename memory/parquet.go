package memory

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	arrowmem "github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/himes-rl/himes/embedding"
	"github.com/himes-rl/himes/internal/parquetfile"
)

// Format tags persisted memory files.
const Format = "himes-memory-v2"

// Schema-level metadata keys of a memory Parquet file.
const (
	metaFormat   = "himes.format"
	metaEmbedder = "himes.embedder"
	metaTaxonomy = "himes.taxonomy_sha256"
)

func fileSchema(md arrow.Metadata) *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: "user", Type: arrow.BinaryTypes.String},
		{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "text", Type: arrow.BinaryTypes.String},
		{Name: "time", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		{Name: "seq", Type: arrow.PrimitiveTypes.Int64},
		{Name: "topic", Type: arrow.BinaryTypes.String},
		{Name: "subtopic", Type: arrow.BinaryTypes.String},
		{Name: "importance", Type: arrow.PrimitiveTypes.Float64},
		{Name: "entities", Type: arrow.ListOf(arrow.BinaryTypes.String)},
		{Name: "embedding", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
	}, &md)
}

// Save writes the store as one Parquet file, rows ordered by user,
// topic, subtopic, time (so each partition is contiguous), with the
// embedder name and taxonomy fingerprint in the schema metadata. The write
// is atomic and durable (internal/parquetfile).
func Save(ctx context.Context, path string, m *Store) error {
	idx := make([]int, len(m.entries))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ea, eb := m.entries[a], m.entries[b]
		for _, c := range []int{strings.Compare(ea.User, eb.User), strings.Compare(ea.Topic, eb.Topic),
			strings.Compare(ea.Subtopic, eb.Subtopic), ea.Time.Compare(eb.Time)} {
			if c != 0 {
				return c
			}
		}
		return 0
	})
	md := arrow.NewMetadata([]string{metaFormat, metaEmbedder, metaTaxonomy},
		[]string{Format, m.emb.Name(), m.tax.Fingerprint})
	schema := fileSchema(md)
	b := array.NewRecordBuilder(arrowmem.DefaultAllocator, schema)
	defer b.Release()
	users := b.Field(0).(*array.StringBuilder)
	ids := b.Field(1).(*array.StringBuilder)
	texts := b.Field(2).(*array.StringBuilder)
	times := b.Field(3).(*array.TimestampBuilder)
	seqs := b.Field(4).(*array.Int64Builder)
	topics := b.Field(5).(*array.StringBuilder)
	subs := b.Field(6).(*array.StringBuilder)
	imps := b.Field(7).(*array.Float64Builder)
	ents := b.Field(8).(*array.ListBuilder)
	entVals := ents.ValueBuilder().(*array.StringBuilder)
	embs := b.Field(9).(*array.ListBuilder)
	vals := embs.ValueBuilder().(*array.Float32Builder)
	for _, i := range idx {
		e := m.entries[i]
		users.Append(e.User)
		ids.Append(e.ID)
		texts.Append(e.Text)
		times.Append(arrow.Timestamp(e.Time.UTC().UnixMicro()))
		seqs.Append(e.Seq)
		topics.Append(e.Topic)
		subs.Append(e.Subtopic)
		imps.Append(e.Importance)
		ents.Append(true)
		entVals.AppendValues(e.Entities, nil)
		embs.Append(true)
		vals.AppendValues(e.Embedding, nil)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	if err := ctx.Err(); err != nil {
		return err
	}
	// File-level key-value metadata is what readers reliably get back; the
	// stored Arrow schema carries the same keys.
	opts := parquetfile.Options{StoreSchema: true, MetaKeys: md.Keys(), MetaValues: md.Values()}
	err := parquetfile.WriteFile(path, schema, opts, func(w *parquetfile.Writer) error { return w.Write(rec) })
	if err != nil {
		return fmt.Errorf("save memory %s: %w", path, err)
	}
	return nil
}

// Load reads a memory Parquet file written by Save and builds a
// store with cfg's taxonomy and classifier. The file's embedder and taxonomy
// must be the ones given: vectors from another embedding space or labels
// from another taxonomy would be silently meaningless.
func Load(ctx context.Context, path string, cfg Config, emb embedding.Embedder) (*Store, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load memory: %w", err)
	}
	tbl, err := parquetfile.ReadTable(ctx, path, raw, 1<<16)
	if err != nil {
		return nil, err
	}
	defer tbl.Release()
	get := tbl.Meta
	if f := get(metaFormat); f == "himes-memory-v1" {
		return nil, fmt.Errorf("%s: a memory file of an older himes (%s, without ids): rebuild with `himes memory build`", path, f)
	} else if f != Format {
		return nil, fmt.Errorf("%s: not a himes memory file (format %q, want %q)", path, f, Format)
	}
	if e := get(metaEmbedder); e != emb.Name() {
		return nil, fmt.Errorf("%s: memories embedded with %q, the configured embedder is %q: rebuild with `himes memory build`", path, e, emb.Name())
	}
	tax, err := LoadTaxonomy(cfg.Taxonomy)
	if err != nil {
		return nil, err
	}
	if t := get(metaTaxonomy); t != tax.Fingerprint {
		return nil, fmt.Errorf("%s: labelled with another taxonomy (sha256 %.12s…, configured %.12s…): rebuild with `himes memory build`", path, t, tax.Fingerprint)
	}
	want := fileSchema(arrow.Metadata{})
	for i, f := range want.Fields() {
		if tbl.NumCols() <= int64(i) || tbl.Schema().Field(i).Name != f.Name || !arrow.TypeEqual(tbl.Schema().Field(i).Type, f.Type) {
			return nil, fmt.Errorf("%s: column %d: want %s %s", path, i, f.Name, f.Type)
		}
	}
	entries := make([]Entry, 0, tbl.NumRows())
	tr := array.NewTableReader(tbl, 1<<16)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		users := rec.Column(0).(*array.String)
		ids := rec.Column(1).(*array.String)
		texts := rec.Column(2).(*array.String)
		times := rec.Column(3).(*array.Timestamp)
		seqs := rec.Column(4).(*array.Int64)
		topics := rec.Column(5).(*array.String)
		subs := rec.Column(6).(*array.String)
		imps := rec.Column(7).(*array.Float64)
		ents := rec.Column(8).(*array.List)
		entVals := ents.ListValues().(*array.String)
		embs := rec.Column(9).(*array.List)
		vals := embs.ListValues().(*array.Float32)
		for r := 0; r < int(rec.NumRows()); r++ {
			lo, hi := embs.ValueOffsets(r)
			elo, ehi := ents.ValueOffsets(r)
			entities := make([]string, 0, ehi-elo)
			for j := elo; j < ehi; j++ {
				entities = append(entities, entVals.Value(int(j)))
			}
			entries = append(entries, Entry{
				User: users.Value(r), ID: ids.Value(r), Text: texts.Value(r),
				Time: time.UnixMicro(int64(times.Value(r))).UTC(), Seq: seqs.Value(r),
				Topic: topics.Value(r), Subtopic: subs.Value(r), Importance: imps.Value(r),
				Entities: entities, Embedding: slices.Clone(vals.Float32Values()[lo:hi]),
			})
		}
	}
	if err := tr.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cls, err := NewClassifier(ctx, cfg, tax, emb)
	if err != nil {
		return nil, err
	}
	m, err := NewStore(ctx, cfg, emb, tax, cls, entries)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
