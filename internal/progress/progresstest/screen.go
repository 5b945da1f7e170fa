// Package progresstest holds what tests of progress output share.
package progresstest

import "strings"

// Screen replays what a terminal shows for s: \r goes back to the line's
// start, \n ends the line, other characters overwrite. Trailing blanks are
// dropped, as a terminal shows none.
func Screen(s string) []string {
	var lines []string
	var cur []rune
	col := 0
	for _, r := range s {
		switch r {
		case '\r':
			col = 0
		case '\n':
			lines = append(lines, strings.TrimRight(string(cur), " "))
			cur, col = nil, 0
		default:
			if col < len(cur) {
				cur[col] = r
			} else {
				cur = append(cur, r)
			}
			col++
		}
	}
	return append(lines, strings.TrimRight(string(cur), " "))
}
