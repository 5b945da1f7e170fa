package evaluate

import (
	"context"
	"fmt"
	"math"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/himes-rl/himes/internal/parquetfile"
)

// TurnMetrics is one system's per-turn values of some metrics, read back
// from an evaluation's turns.parquet: Keys[i] is turn i's (conversation,
// turn) and Values[m][i] its value of metric m (NaN where the metric does
// not apply: no judged passage, a failed turn).
type TurnMetrics struct {
	ConvIDs []string
	Turns   []int
	Values  map[string][]float64
}

// ReadTurnMetrics reads the rows of system (with memory off or on) from an
// evaluation's turns.parquet, in file order, with the given metric columns
// (e.g. MRecall10, MNDCG3). It is how experiments compare two evaluations
// turn by turn (a paired test) without re-running them.
func ReadTurnMetrics(ctx context.Context, path, system string, memory bool, metrics []string) (TurnMetrics, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return TurnMetrics{}, fmt.Errorf("per-turn results: %w", err)
	}
	tbl, err := parquetfile.ReadTable(ctx, path, raw, 1<<14)
	if err != nil {
		return TurnMetrics{}, err
	}
	defer tbl.Release()
	col := func(name string) (*arrow.Chunked, error) {
		idx := tbl.Schema().FieldIndices(name)
		if len(idx) != 1 {
			return nil, fmt.Errorf("%s: no column %q (not a himes eval turns.parquet?)", path, name)
		}
		return tbl.Column(idx[0]).Data(), nil
	}
	out := TurnMetrics{Values: map[string][]float64{}}
	sysCol, err := col("system")
	if err != nil {
		return out, err
	}
	memCol, err := col("memory")
	if err != nil {
		return out, err
	}
	convCol, err := col("conv_id")
	if err != nil {
		return out, err
	}
	turnCol, err := col("turn")
	if err != nil {
		return out, err
	}
	mcols := make([]*arrow.Chunked, len(metrics))
	for i, m := range metrics {
		if mcols[i], err = col(m); err != nil {
			return out, err
		}
	}
	// The columns of one table are chunked alike (one record batch each).
	for c := range sysCol.Chunks() {
		sys, ok1 := sysCol.Chunk(c).(*array.String)
		mem, ok2 := memCol.Chunk(c).(*array.Boolean)
		conv, ok3 := convCol.Chunk(c).(*array.String)
		turn, ok4 := turnCol.Chunk(c).(*array.Int64)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return out, fmt.Errorf("%s: system/memory/conv_id/turn columns of unexpected types", path)
		}
		vals := make([]*array.Float64, len(metrics))
		for i, mc := range mcols {
			v, ok := mc.Chunk(c).(*array.Float64)
			if !ok {
				return out, fmt.Errorf("%s: column %q is not float64", path, metrics[i])
			}
			vals[i] = v
		}
		for r := 0; r < sys.Len(); r++ {
			if sys.Value(r) != system || mem.Value(r) != memory {
				continue
			}
			out.ConvIDs = append(out.ConvIDs, conv.Value(r))
			out.Turns = append(out.Turns, int(turn.Value(r)))
			for i, m := range metrics {
				x := math.NaN()
				if vals[i].IsValid(r) {
					x = vals[i].Value(r)
				}
				out.Values[m] = append(out.Values[m], x)
			}
		}
	}
	if len(out.ConvIDs) == 0 {
		return out, fmt.Errorf("%s: no rows of system %q (memory %v)", path, system, memory)
	}
	return out, nil
}
