// Package parquetfile is the one way himes writes Parquet: WriteFile (and
// Write, its one-batch form) writes a file atomically and durably through
// internal/atomicfile (a reader or a crash sees the old file or the whole
// new one), buffered so a file is a few write calls instead of one per
// page; Encode streams the same encoding into a writer the caller owns.
// Both take the table's schema, its record batches one at a time (each
// Write is one or more row groups, so a large table never has to be held
// whole) and the Options of that table (zstd unless told otherwise).
// ReadTable reads a whole file back as one table with its metadata.
package parquetfile

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/himes-rl/himes/internal/atomicfile"
)

// Options are how one table is encoded. The zero value is zstd with
// arrow's defaults for everything else.
type Options struct {
	// Snappy compresses with snappy instead of zstd (cheaper CPU, larger
	// files: the rollout ledger, written every few steps).
	Snappy bool
	// RowGroupRows caps the rows of one row group (0: arrow's default).
	RowGroupRows int64
	// NoDictionary turns dictionary encoding off for every column.
	NoDictionary bool
	// StatsFor, when non-nil, keeps min/max statistics only for these
	// columns (the ones a reader skips files by).
	StatsFor []string
	// StoreSchema stores the Arrow schema in the file, so its schema-level
	// metadata reads back with it.
	StoreSchema bool
	// MetaKeys and MetaValues are the file's key-value metadata, in order.
	MetaKeys, MetaValues []string
}

func (o Options) props() (*parquet.WriterProperties, pqarrow.ArrowWriterProperties) {
	codec := compress.Codecs.Zstd
	if o.Snappy {
		codec = compress.Codecs.Snappy
	}
	opts := []parquet.WriterProperty{parquet.WithCompression(codec)}
	if o.RowGroupRows > 0 {
		opts = append(opts, parquet.WithMaxRowGroupLength(o.RowGroupRows))
	}
	if o.NoDictionary {
		opts = append(opts, parquet.WithDictionaryDefault(false))
	}
	if o.StatsFor != nil {
		opts = append(opts, parquet.WithStats(false))
		for _, c := range o.StatsFor {
			opts = append(opts, parquet.WithStatsFor(c, true))
		}
	}
	arrowProps := pqarrow.DefaultWriterProps()
	if o.StoreSchema {
		arrowProps = pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())
	}
	return parquet.NewWriterProperties(opts...), arrowProps
}

// Writer takes a table's record batches, in order.
type Writer struct {
	fw *pqarrow.FileWriter
}

// Write appends rec as one row group (several when it has more rows than
// Options.RowGroupRows).
func (w *Writer) Write(rec arrow.RecordBatch) error {
	if err := w.fw.Write(rec); err != nil {
		return fmt.Errorf("write parquet rows: %w", err)
	}
	return nil
}

// Encode writes a complete Parquet file (footer included) of schema into
// dst: fill hands it the record batches. dst is the caller's and is not
// closed; nothing is written atomically here (WriteFile does that).
func Encode(dst io.Writer, schema *arrow.Schema, o Options, fill func(*Writer) error) error {
	if len(o.MetaKeys) != len(o.MetaValues) {
		return fmt.Errorf("parquet metadata: %d keys, %d values", len(o.MetaKeys), len(o.MetaValues))
	}
	props, arrowProps := o.props()
	// The bare io.Writer keeps pqarrow from closing dst.
	fw, err := pqarrow.NewFileWriter(schema, struct{ io.Writer }{dst}, props, arrowProps)
	if err != nil {
		return fmt.Errorf("parquet writer: %w", err)
	}
	for i, k := range o.MetaKeys {
		if err := fw.AppendKeyValueMetadata(k, o.MetaValues[i]); err != nil {
			fw.Close()
			return fmt.Errorf("parquet metadata %s: %w", k, err)
		}
	}
	if err := fill(&Writer{fw: fw}); err != nil {
		fw.Close()
		return err
	}
	if err := fw.Close(); err != nil {
		return fmt.Errorf("close parquet writer: %w", err)
	}
	return nil
}

// WriteFile writes the Parquet file of Encode to path atomically and
// durably (internal/atomicfile: temporary file, fsync, rename, fsync of the
// directory); a failed fill leaves the old file, if any, untouched.
func WriteFile(path string, schema *arrow.Schema, o Options, fill func(*Writer) error) error {
	return atomicfile.Write(path, 0o644, func(f io.Writer) error {
		bw := bufio.NewWriterSize(f, 1<<20)
		if err := Encode(bw, schema, o, fill); err != nil {
			return err
		}
		return bw.Flush()
	})
}

// Write writes rec (of schema) to path atomically with zstd compression:
// WriteFile of one batch with the default Options.
func Write(path string, schema *arrow.Schema, rec arrow.RecordBatch) error {
	return WriteFile(path, schema, Options{}, func(w *Writer) error { return w.Write(rec) })
}

// Table is a whole Parquet file read into memory, with its key-value
// metadata. Release it when done.
type Table struct {
	arrow.Table
	meta metadata.KeyValueMetadata
}

// Meta returns the file's key-value metadata entry k ("" when absent).
func (t Table) Meta(k string) string {
	if v := t.meta.FindValue(k); v != nil {
		return *v
	}
	return ""
}

// ReadTable reads the Parquet file at path (raw: its bytes, already read)
// into one table, batchSize rows per chunk. Errors name the file.
func ReadTable(ctx context.Context, path string, raw []byte, batchSize int64) (Table, error) {
	pf, err := file.NewParquetReader(bytes.NewReader(raw))
	if err != nil {
		return Table{}, fmt.Errorf("%s: open parquet: %w", path, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: batchSize}, memory.DefaultAllocator)
	if err != nil {
		return Table{}, fmt.Errorf("%s: parquet reader: %w", path, err)
	}
	tbl, err := fr.ReadTable(ctx)
	if err != nil {
		return Table{}, fmt.Errorf("%s: read parquet: %w", path, err)
	}
	return Table{Table: tbl, meta: pf.MetaData().KeyValueMetadata()}, nil
}
