package progresstest

import (
	"slices"
	"testing"
)

func TestScreenOverwritesAfterCarriageReturn(t *testing.T) {
	got := Screen("step 1/3\rstep 2/3\rstep 3/3 done  \nnext\rNE")
	if want := []string{"step 3/3 done", "NExt"}; !slices.Equal(got, want) {
		t.Fatalf("Screen = %q, want %q", got, want)
	}
}
