package datasets

import (
	"bufio"
	"context"
	"fmt"
	"io"

	"github.com/himes-rl/himes/internal/atomicfile"
)

// WriteJSONLContext writes turns in the normalized schema atomically: a
// reader never sees a half-written file. Map keys (meta) are sorted by
// encoding/json, so equal turns give byte-identical files.
func WriteJSONLContext(ctx context.Context, path string, turns []Turn) error {
	return writeFileAtomic(path, func(w io.Writer) error {
		for i, t := range turns {
			if i%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("write %s: %w", path, err)
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
					return fmt.Errorf("write %s: %w", path, err)
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

// writeFileAtomic writes path through internal/atomicfile (temporary file,
// fsync, rename, fsync of the directory), buffered: a reader or a crash sees
// the old file or the whole new one.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	return atomicfile.Write(path, 0o644, func(f io.Writer) error {
		bw := bufio.NewWriterSize(f, 1<<20)
		if err := write(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
}
