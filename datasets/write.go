package datasets

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteJSONL writes turns in the normalized schema, one per line. See
// WriteJSONLContext.
func WriteJSONL(path string, turns []Turn) error {
	return WriteJSONLContext(context.Background(), path, turns)
}

// WriteJSONLContext writes turns in the normalized schema atomically: a
// reader never sees a half-written file. Map keys (meta) are sorted by
// encoding/json, so equal turns give byte-identical files.
func WriteJSONLContext(ctx context.Context, path string, turns []Turn) error {
	return writeFileAtomic(path, func(w io.Writer) error {
		for i, t := range turns {
			if i%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			b, err := t.MarshalJSON()
			if err != nil {
				return fmt.Errorf("turn %s: %w", t.ID(), err)
			}
			if _, err := w.Write(append(b, '\n')); err != nil {
				return err
			}
		}
		return nil
	})
}

// WriteJSONLValues writes any values, one JSON document per line, atomically.
func WriteJSONLValues[T any](ctx context.Context, path string, values []T) error {
	return writeFileAtomic(path, func(w io.Writer) error {
		for i, v := range values {
			if i%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			b, err := marshalNoEscape(v)
			if err != nil {
				return fmt.Errorf("record %d: %w", i, err)
			}
			if _, err := w.Write(append(b, '\n')); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeFileAtomic writes to a temporary file in the target's directory, syncs
// it and renames it over path, so path holds either the old or the new file.
func writeFileAtomic(path string, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := write(bw); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
