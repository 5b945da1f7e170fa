package configs

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every float key refuses an absurd finite value, naming the key: a range
// checked only from below (or not at all) lets 1e300 train on to +Inf.
func TestEveryFloatKeyIsBounded(t *testing.T) {
	keys := floatKeys(t)
	p := writeConfig(t, valid)
	for _, key := range keys {
		for _, v := range []string{"1e300", "-1e300"} {
			_, err := Load(p, []string{key + "=" + v})
			if err == nil {
				t.Errorf("--set %s=%s: accepted", key, v)
				continue
			}
			if !strings.Contains(err.Error(), key+":") {
				t.Errorf("--set %s=%s: the error does not name the key: %v", key, v, err)
			}
		}
	}
}

// The table's bounds are the ones enforced: just outside each is refused
// with the documented range in the message, and every entry is a real key.
func TestFloatRangesEnforced(t *testing.T) {
	keys := floatKeys(t)
	p := writeConfig(t, valid)
	for key, r := range floatRanges {
		if !slices.Contains(keys, key) {
			t.Errorf("floatRanges has %q, which is not a float key", key)
			continue
		}
		outside := []float64{math.Nextafter(r.hi, math.Inf(1)), math.Nextafter(r.lo, math.Inf(-1))}
		if r.loOpen {
			outside = append(outside, r.lo)
		}
		for _, x := range outside {
			set := key + "=" + strconv.FormatFloat(x, 'g', -1, 64)
			_, err := Load(p, []string{set})
			if err == nil || !strings.Contains(err.Error(), key+": must be in "+r.String()) {
				t.Errorf("--set %s: want the range %v named, got %v", set, r, err)
			}
		}
	}
}

func TestFloatRangeString(t *testing.T) {
	if got := (floatRange{lo: 0, hi: 1e6, loOpen: true}).String(); got != "(0, 1e+06]" {
		t.Errorf("open range: %q", got)
	}
	if got := (floatRange{lo: -100, hi: 100}).String(); got != "[-100, 100]" {
		t.Errorf("closed range: %q", got)
	}
}
