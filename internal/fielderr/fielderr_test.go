package fielderr

import (
	"math"
	"testing"
)

func TestSeconds(t *testing.T) {
	for _, v := range []float64{0, -1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		err := Seconds("stop_timeout_seconds", v)
		if fe, ok := err.(*Error); !ok || fe.Field != "stop_timeout_seconds" {
			t.Errorf("Seconds(%v) = %v, want a field error naming stop_timeout_seconds", v, err)
		}
	}
	for _, v := range []float64{0.001, 10, 1e9} {
		if err := Seconds("t", v); err != nil {
			t.Errorf("Seconds(%v) = %v", v, err)
		}
	}
}
