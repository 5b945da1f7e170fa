package progress

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// Seconds prints as the millisecond decimal it stands for, for every
// duration up to 200 s (2.728 s is one that Duration.Seconds of the
// rounded duration prints as 2.7279999999999998), and rounds half a
// millisecond away from zero.
func TestSecondsPrintsMilliseconds(t *testing.T) {
	for ms := int64(0); ms <= 200_000; ms++ {
		want := fmt.Sprintf("%d.%03d", ms/1000, ms%1000)
		want = trimZeros(want)
		got := strconv.FormatFloat(Seconds(time.Duration(ms)*time.Millisecond+400*time.Microsecond), 'g', -1, 64)
		if got != want {
			t.Fatalf("%d ms + 0.4 ms: got %s, want %s", ms, got, want)
		}
	}
	if got := Seconds(2728*time.Millisecond + 500*time.Microsecond); got != 2.729 {
		t.Errorf("2728.5 ms: got %v, want 2.729", got)
	}
}

// trimZeros drops a decimal string's trailing zeros and a bare point.
func trimZeros(s string) string {
	for s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	if s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s
}
