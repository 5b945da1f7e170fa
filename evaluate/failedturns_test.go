package evaluate

import (
	"strings"
	"testing"
)

func TestCheckFailedTurns(t *testing.T) {
	rep := Report{Systems: []SystemReport{{Name: "raw", Turns: 10, Failed: 5}, {Name: "gold", Turns: 10, Failed: 6}}}
	err := CheckFailedTurns(rep, 0.5, "x")
	if err == nil || !strings.Contains(err.Error(), "gold 6 of 10") || strings.Contains(err.Error(), "raw 5") {
		t.Errorf("bound 0.5: %v (5 of 10 is at the bound, 6 above)", err)
	}
	if err := CheckFailedTurns(rep, 1, "x"); err != nil {
		t.Errorf("bound 1: %v", err)
	}
	all := Report{Systems: []SystemReport{{Name: "raw", Turns: 3, Failed: 3}}}
	if err := CheckFailedTurns(all, 1, "x"); err == nil || !strings.Contains(err.Error(), "every turn failed") {
		t.Errorf("all failed at bound 1: %v", err)
	}
}
